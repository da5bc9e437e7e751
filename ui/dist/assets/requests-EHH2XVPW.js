import{a,b,c}from"./chunk-4I3H5NF4.js";import"./chunk-UIMWO5DE.js";import"./chunk-ZYG473UW.js";import"./chunk-CDHFZB75.js";export{c as blockerNote,a as mount,b as requestTable};
