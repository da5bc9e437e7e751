import{a,b}from"./chunk-UYTE3G3T.js";import"./chunk-UIMWO5DE.js";import"./chunk-PWKJ65T7.js";import"./chunk-PLVRHGDW.js";export{a as mount,b as requestTable};
