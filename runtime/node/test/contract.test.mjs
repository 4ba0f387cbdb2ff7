// The adapter contract (tests/cases/adapters/scenarios.json, read its
// "about"): every scenario through the SDK adapter, each request delivered
// to a real SDK Client as a server's transport would deliver it. The Python
// and rmcp adapters run the same file.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Engine, loadPolicy } from '../index.js';
import { installSampling } from '../sdk.js';
import { postgresOrSkip, withSchema } from './postgres.mjs';
import { casesPath, completion, scratch, scriptedServer, sleep } from './support.mjs';

const contract = JSON.parse(readFileSync(casesPath('adapters', 'scenarios.json'), 'utf8'));
const policy = loadPolicy(casesPath('adapters', contract.table));

test('the contract has scenarios', () => {
  assert.ok(contract.scenarios.length >= 8);
});

// Each scenario on its store; the durable ones (sqlite) again on the
// PostgreSQL store, which must keep what they remember the same way.
const runs = contract.scenarios.flatMap((scenario) =>
  scenario.store === 'sqlite' ? [[scenario, 'sqlite'], [scenario, 'postgres']] : [[scenario, scenario.store]],
);

for (const [scenario, store] of runs) {
  test(`scenario: ${scenario.name} (${store})`, async (t) => {
    let open;
    if (store === 'memory') {
      open = () => Engine.memory(policy);
    } else if (store === 'sqlite') {
      const path = join(scratch(t), 'decisions.sqlite3');
      open = () => Engine.openSqlite(policy, path);
    } else {
      const url = postgresOrSkip(t);
      if (!url) return;
      const { spec } = withSchema(url, t);
      open = () => Engine.openPostgres(policy, spec);
    }
    assert.ok(['sqlite', 'memory'].includes(scenario.store), `store ${scenario.store}`);

    // What the current step's user and model do, and what they saw.
    let step;
    let seen;
    const connect = async () =>
      scriptedServer((client) =>
        installSampling(client, {
          engine,
          server: scenario.server,
          consent: async () => {
            seen.asked = true;
            return step.consent === true;
          },
          handler: async (request, extra) => {
            seen.called = true;
            seen.params = request.params;
            if (step.model?.delayMs) await sleep(step.model.delayMs, extra.signal);
            return completion();
          },
          usage: () => step.model?.usageTokens,
        }),
      );

    let engine = await open();
    let server = await connect();
    t.after(() => server.close());
    for (const [index, current] of scenario.steps.entries()) {
      const where = `${scenario.name}, step ${index + 1}${current.about ? ` (${current.about})` : ''}`;
      if (current.reopen) {
        assert.notEqual(store, 'memory', `${where}: reopen needs a durable store`);
        await server.close();
        engine = await open();
        server = await connect();
      }
      step = current;
      seen = { asked: false, called: false, params: undefined };
      const response = await server.sample(current.request);
      const expect = current.expect;

      assert.equal(seen.asked, expect.asked, `${where}: consent asked`);
      assert.equal(seen.called, expect.called, `${where}: sampling callback called`);
      for (const [member, value] of Object.entries(expect.params ?? {})) {
        assert.deepEqual(seen.params?.[member], value, `${where}: params.${member}`);
      }
      if (expect.error) {
        assert.equal(response.result, undefined, `${where}: a result instead of an error`);
        const { error } = response;
        assert.ok(error, `${where}: no error`);
        assert.equal(error.code, expect.error.code, `${where}: error.code`);
        assert.equal(error.data?.reason, expect.error.reason, `${where}: data.reason`);
        if ('retryable' in expect.error) {
          assert.equal(error.data?.retryable, expect.error.retryable, `${where}: data.retryable`);
        }
        if (expect.error.timing) {
          assert.ok(
            error.data?.[expect.error.timing] !== undefined,
            `${where}: data.${expect.error.timing} in ${JSON.stringify(error.data)}`,
          );
        }
      } else {
        assert.equal(response.error, undefined, `${where}: ${JSON.stringify(response.error)}`);
        assert.deepEqual(response.result.content, completion().content, `${where}: the result`);
        assert.deepEqual(response.result._meta ?? null, expect.meta, `${where}: result._meta`);
      }
    }
  });
}
