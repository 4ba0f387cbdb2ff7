// Types of index.js. The native classes' types are native.d.ts, which
// `npm run build` generates from src/lib.rs (CI checks it is up to date).
import type { Policy } from './native.js';

export { Policy, Engine, Decision } from './native.js';

/** A failure of the binding: `code` is a stable name (`table.*`, `store.*`, `binding.*`). */
export interface McpolicyError extends Error {
  code: string;
}

/**
 * The request identity of `params` from `server`, hashing the identity
 * `fields` in order (docs/spec/identity.md).
 */
export declare function requestIdentity(
  server: string,
  params: Record<string, unknown>,
  fields: string[],
): string;

/** The compiled table at `path` (`mcpc compile ... -o path`), verified. */
export declare function loadPolicy(path: string): Policy;
