import{a,b}from"./chunk-ZTGORNKQ.js";import"./chunk-UIMWO5DE.js";import"./chunk-KVJMEJCH.js";import"./chunk-X25VGLRA.js";export{a as mount,b as requestTable};
