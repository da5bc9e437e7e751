import{a,b}from"./chunk-GCOC4S4B.js";import"./chunk-UIMWO5DE.js";import"./chunk-3GLW3COD.js";import"./chunk-CDHFZB75.js";export{a as mount,b as requestTable};
