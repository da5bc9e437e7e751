import{a,b}from"./chunk-F5PZUVWM.js";import"./chunk-UIMWO5DE.js";import"./chunk-O7NI2Q2P.js";import"./chunk-CDHFZB75.js";export{a as mount,b as requestTable};
