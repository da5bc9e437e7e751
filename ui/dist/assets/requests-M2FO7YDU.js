import{a,b}from"./chunk-KCAJFXC2.js";import"./chunk-UIMWO5DE.js";import"./chunk-EFTEHIRY.js";import"./chunk-CDHFZB75.js";export{a as mount,b as requestTable};
