// sluice for ES modules: `import { Limiter, policy, express } from 'sluice'`
// or `import sluice from 'sluice'`.  The same objects as require('sluice')
// (index.js): one addon, one set of classes, whichever way it is loaded.
import sluice from './index.js';

export default sluice;
export const { Limiter, Policy, policy, express, fastify, ipKey, version } = sluice;
