import{a,b,c}from"./chunk-EER225XR.js";import"./chunk-UIMWO5DE.js";import"./chunk-3GLW3COD.js";import"./chunk-CDHFZB75.js";export{c as blockerNote,a as mount,b as requestTable};
