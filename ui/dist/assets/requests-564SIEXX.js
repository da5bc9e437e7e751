import{a,b}from"./chunk-FXYOJB52.js";import"./chunk-UIMWO5DE.js";import"./chunk-JXA3VXPA.js";import"./chunk-CDHFZB75.js";export{a as mount,b as requestTable};
