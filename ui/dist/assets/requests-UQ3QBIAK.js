import{a,b}from"./chunk-ARMI2RY7.js";import"./chunk-UIMWO5DE.js";import"./chunk-CGEDVYG4.js";import"./chunk-CDHFZB75.js";export{a as mount,b as requestTable};
