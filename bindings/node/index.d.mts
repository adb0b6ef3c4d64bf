// Type declarations for the ES module entry (index.mjs): the declarations
// of index.d.ts, the named exports index.mjs gives, and its default export
// (the same object require('sluice') returns).  Without this file,
// TypeScript's node16/nodenext resolution would read index.d.ts (a
// CommonJS declaration file) for an ES module.

export * from './index.js';
import * as sluice from './index.js';
export default sluice;
