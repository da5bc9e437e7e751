import{a,b}from"./chunk-EDC35V6X.js";import"./chunk-UIMWO5DE.js";import"./chunk-VLLVVGVD.js";import"./chunk-X25VGLRA.js";export{a as mount,b as requestTable};
