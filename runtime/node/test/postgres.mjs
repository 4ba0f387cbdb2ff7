// The PostgreSQL cluster of the tests: MCPOLICY_TEST_POSTGRES (a libpq
// connection string; runtime/postgres/README.md). With
// MCPOLICY_REQUIRE_POSTGRES=1 (CI) a missing cluster fails the test.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export function postgresOrSkip(t) {
  const url = process.env.MCPOLICY_TEST_POSTGRES;
  if (url) return url;
  assert.notEqual(
    process.env.MCPOLICY_REQUIRE_POSTGRES,
    '1',
    'MCPOLICY_TEST_POSTGRES is unset and MCPOLICY_REQUIRE_POSTGRES=1',
  );
  t.skip('MCPOLICY_TEST_POSTGRES is unset');
  return undefined;
}

/** A store spec on a schema of this test's own, dropped when it ends. */
export function withSchema(url, t) {
  const schema = `mcpolicy_node_${randomBytes(6).toString('hex')}`;
  t.after(() => {
    spawnSync('psql', [url, '-X', '-q', '-c', `DROP SCHEMA IF EXISTS ${schema} CASCADE`]);
  });
  return { spec: `${url} schema=${schema}`, schema };
}
