import{a,b,c}from"./chunk-7JHAMSAG.js";import"./chunk-UIMWO5DE.js";import"./chunk-MYKX6OFU.js";import"./chunk-CDHFZB75.js";export{c as blockerNote,a as mount,b as requestTable};
