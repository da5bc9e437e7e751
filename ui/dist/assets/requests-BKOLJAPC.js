import{a,b}from"./chunk-2CCFTHWG.js";import"./chunk-UIMWO5DE.js";import"./chunk-YPEU226X.js";import"./chunk-X25VGLRA.js";export{a as mount,b as requestTable};
