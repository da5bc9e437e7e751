import{a,b}from"./chunk-YAXL6HN6.js";import"./chunk-UIMWO5DE.js";import"./chunk-MYKX6OFU.js";import"./chunk-CDHFZB75.js";export{a as mount,b as requestTable};
