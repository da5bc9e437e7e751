import{a,b,c}from"./chunk-VWNSSTOY.js";import"./chunk-UIMWO5DE.js";import"./chunk-BVCUUBCL.js";import"./chunk-CDHFZB75.js";export{c as blockerNote,a as mount,b as requestTable};
