import{a,b}from"./chunk-FSAAJCSZ.js";import"./chunk-UIMWO5DE.js";import"./chunk-PIO6WZEA.js";import"./chunk-CDHFZB75.js";export{a as mount,b as requestTable};
