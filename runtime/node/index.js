// The mcpolicy runtime for Node.js: the native addon (src/lib.rs, built by
// `npm run build` into mcpolicy.node) and a few conveniences over it.
// README.md shows the whole API; index.d.ts types it.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const native = require('./mcpolicy.node');

export const { Policy, Engine, Decision } = native;

/**
 * The request identity of `params` from `server`, hashing the identity
 * `fields` in order (docs/spec/identity.md): the function the frozen vectors
 * of tests/cases/identity/vectors.json pin.
 */
export function requestIdentity(server, params, fields) {
  return native.requestIdentityOf(server, params, fields);
}

/** The compiled table at `path` (`mcpc compile ... -o path`), verified. */
export function loadPolicy(path) {
  return Policy.fromJson(readFileSync(path));
}
