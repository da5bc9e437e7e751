import{a,b}from"./chunk-4TGDGHBR.js";import"./chunk-UIMWO5DE.js";import"./chunk-HUHAFZKB.js";import"./chunk-PLVRHGDW.js";export{a as mount,b as requestTable};
