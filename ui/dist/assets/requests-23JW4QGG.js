import{a,b,c}from"./chunk-P326DPI5.js";import"./chunk-UIMWO5DE.js";import"./chunk-NS5R5G7K.js";import"./chunk-CDHFZB75.js";export{c as blockerNote,a as mount,b as requestTable};
