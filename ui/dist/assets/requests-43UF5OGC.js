import{a,b}from"./chunk-XJXROWDY.js";import"./chunk-UIMWO5DE.js";import"./chunk-ZQH3IMA6.js";import"./chunk-PLVRHGDW.js";export{a as mount,b as requestTable};
