// The SDK adapter's loop beyond the contract's scenarios: what the server
// receives is the frame exactly, usage when the handler reports none, a
// handler that throws, a consent function that fails or is missing.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { Engine, Policy } from '../index.js';
import { installSampling } from '../sdk.js';
import { casesPath, completion, scriptedServer } from './support.mjs';

const policy = Policy.fromJson(readFileSync(casesPath('adapters', 'policy.table.json')));

function params(text, maxTokens = 100) {
  return {
    messages: [{ role: 'user', content: { type: 'text', text } }],
    maxTokens,
    includeContext: 'none',
  };
}

async function connect(t, engine, server, options = {}) {
  let stats;
  const scripted = await scriptedServer((client) => {
    stats = installSampling(client, {
      engine,
      server,
      handler: async () => completion(),
      ...options,
    });
  });
  t.after(() => scripted.close());
  return { ...scripted, stats };
}

test('the server receives the denial frame exactly: code, message and data', async (t) => {
  const engine = Engine.memory(policy);
  const { sample } = await connect(t, engine, 'closed');
  const response = await sample(params('Hello'));
  const frame = await engine.decide(
    'closed',
    JSON.stringify({ jsonrpc: '2.0', id: response.id, method: 'sampling/createMessage', params: params('Hello') }),
  );
  assert.deepEqual(response, JSON.parse(frame.reply));
});

test('without a usage hook the whole maxTokens is counted (docs/spec/evaluation.md, "Settlement")', async (t) => {
  // `tokens`: 1000 a day. 600 counted, not the 42 a model might have used.
  const { sample, stats } = await connect(t, Engine.memory(policy), 'tokens');
  assert.ok((await sample(params('one', 600))).result);
  assert.equal((await sample(params('two', 500))).error?.data?.reason, 'policy.budget_exhausted');
  assert.ok((await sample(params('three', 400))).result);
  assert.equal(stats.settleFailures, 0);
});

test('a handler that throws: its error reaches the server, its usage is settled', async (t) => {
  const { sample } = await connect(t, Engine.memory(policy), 'tokens', {
    handler: async () => {
      const error = new Error('the provider is down');
      error.usageTokens = 100;
      throw error;
    },
  });
  const failed = await sample(params('one', 900));
  assert.equal(failed.error.code, -32603);
  assert.match(failed.error.message, /the provider is down/);
  const { sample: again } = await connect(t, Engine.memory(policy), 'tokens', {
    handler: async () => {
      throw new Error('no usage reported');
    },
  });
  await again(params('a', 900));
  // 900 counted without a report: 900 + 200 does not fit.
  assert.equal((await again(params('b', 200))).error?.data?.reason, 'policy.budget_exhausted');
});

test('a settled failure leaves room: the reported usage replaced the reservation', async (t) => {
  const engine = Engine.memory(policy);
  let fail = true;
  const { sample } = await connect(t, engine, 'tokens', {
    handler: async () => {
      if (fail) {
        const error = new Error('partial');
        error.usageTokens = 100;
        throw error;
      }
      return completion();
    },
    usage: () => 0,
  });
  await sample(params('one', 900));
  fail = false;
  assert.ok((await sample(params('two', 900))).result, '100 + 900 fits 1000');
});

test('a consent function that throws stores nothing: the user is asked again', async (t) => {
  let asked = 0;
  const { sample } = await connect(t, Engine.memory(policy), 'asked', {
    consent: async () => {
      asked += 1;
      if (asked === 1) throw new Error('the dialog crashed');
      return true;
    },
  });
  assert.match((await sample(params('Mail'))).error.message, /the dialog crashed/);
  assert.ok((await sample(params('Mail'))).result);
  assert.equal(asked, 2);
});

test('without a consent function a request needing consent is refused -32603, nothing stored', async (t) => {
  const engine = Engine.memory(policy);
  const { sample, stats } = await connect(t, engine, 'asked');
  const response = await sample(params('Mail'));
  assert.equal(response.error.code, -32603);
  assert.equal(stats.consentPrompts, 0);
  assert.equal((await engine.decide('asked', JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'sampling/createMessage', params: params('Mail') }))).kind, 'consent');
});

test('the deadline aborts the handler\'s signal', async (t) => {
  let aborted;
  const { sample, stats } = await connect(t, Engine.memory(policy), 'slow', {
    handler: (request, extra) =>
      new Promise((resolve, reject) => {
        extra.signal.addEventListener('abort', () => {
          aborted = extra.signal.reason;
          reject(extra.signal.reason);
        });
      }),
  });
  const response = await sample(params('Think'));
  assert.equal(response.error.data.reason, 'policy.deadline');
  assert.match(String(aborted), /deadline of 200 ms/);
  assert.equal(stats.deadlineMisses, 1);
});
