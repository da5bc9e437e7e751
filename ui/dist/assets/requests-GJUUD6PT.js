import{a,b}from"./chunk-WFTWNGPQ.js";import"./chunk-UIMWO5DE.js";import"./chunk-EEPA6VNZ.js";import"./chunk-CDHFZB75.js";export{a as mount,b as requestTable};
