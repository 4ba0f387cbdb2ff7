// The native binding itself: decisions as objects with their frames, the
// transitions of a grant and a pending consent, and failures as errors with
// stable codes (never a crash of the process).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Engine, Policy } from '../index.js';
import { frameError } from '../sdk.js';
import { casesPath, scratch } from './support.mjs';

const tableText = readFileSync(casesPath('adapters', 'policy.table.json'), 'utf8');
const policy = Policy.fromJson(tableText);

function request(id, params) {
  return JSON.stringify({ jsonrpc: '2.0', id, method: 'sampling/createMessage', params });
}

function hello(text = 'Hello', maxTokens = 100, includeContext = 'none') {
  return {
    messages: [{ role: 'user', content: { type: 'text', text } }],
    maxTokens,
    includeContext,
  };
}

test('a table that is not one is refused with its code', () => {
  assert.throws(() => Policy.fromJson('{'), { code: 'table.json' });
  const table = JSON.parse(tableText);
  table.servers[0].digest = `sha256:${'0'.repeat(64)}`;
  assert.throws(() => Policy.fromJson(JSON.stringify(table)), { code: 'table.digest_mismatch' });
  assert.equal(policy.protocol, '2025-11-25');
});

test('a denial carries its frame: the error object is the reply\'s, with the request id', async () => {
  const engine = Engine.memory(policy);
  const decision = await engine.decide('closed', request(7, hello()));
  assert.equal(decision.kind, 'deny');
  assert.equal(decision.reason, 'policy.sampling_disabled');
  const reply = JSON.parse(decision.reply.toString('utf8'));
  assert.equal(reply.id, 7);
  assert.deepEqual(decision.error, reply.error);
  assert.equal(decision.error.code, -32010);
  // frames.md, "Denial frames": the SDK sends code, message and data as they are.
  const thrown = frameError(decision.error);
  assert.equal(thrown.message, reply.error.message);
  assert.equal(thrown.code, reply.error.code);
  assert.deepEqual(thrown.data, reply.error.data);
});

test('a trim narrows the params, annotates the result, and is completed once', async () => {
  const engine = Engine.memory(policy);
  const decision = await engine.decide('summarizer', request('a', hello('Sum', 9000, 'allServers')));
  assert.equal(decision.kind, 'trim');
  assert.equal(decision.params.maxTokens, 256);
  assert.equal(decision.params.includeContext, 'thisServer');
  const result = decision.annotate({ role: 'assistant', content: { type: 'text', text: 'x' } });
  assert.deepEqual(result._meta, decision.meta);
  assert.ok(decision.live);
  await decision.complete(10);
  assert.equal(decision.live, false);
  await assert.rejects(decision.complete(10), { code: 'binding.decision_settled' });
  assert.throws(() => decision.annotate({}), { code: 'binding.decision_settled' });
  await assert.rejects(decision.approve(), { code: 'binding.decision_settled' });
});

test('usage must be a whole number of tokens; a bad one leaves the grant live', async () => {
  const engine = Engine.memory(policy);
  const decision = await engine.decide('open', request(1, hello()));
  assert.equal(decision.kind, 'allow');
  for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
    await assert.rejects(decision.complete(bad), { code: 'binding.bad_usage' }, String(bad));
  }
  assert.ok(decision.live);
  await decision.complete(0);
});

test('a consent decision is approved or refused, not completed', async () => {
  const engine = Engine.memory(policy);
  const pending = await engine.decide('asked', request(2, hello('Mail')));
  assert.equal(pending.kind, 'consent');
  assert.match(pending.identity, /^asked:/);
  await assert.rejects(pending.complete(1), { code: 'binding.not_a_grant' });
  const refused = await pending.refuse();
  assert.equal(refused.kind, 'deny');
  assert.equal(refused.reason, 'user.denied');
  assert.equal(refused.error.code, -1);
  const replayed = await engine.decide('asked', request(3, hello('Mail')));
  assert.equal(replayed.kind, 'deny');
  assert.ok(replayed.replayed);
  assert.equal(JSON.parse(replayed.reply).id, 3);
});

test('a deadline miss is a denial stored for the retry', async () => {
  const engine = Engine.memory(policy);
  const grant = await engine.decide('slow', request(4, hello('Think')));
  assert.equal(grant.deadlineMs, 200);
  const missed = await grant.deadlineMissed();
  assert.equal(missed.kind, 'deny');
  assert.equal(missed.reason, 'policy.deadline');
  assert.equal((await engine.decide('slow', request(5, hello('Think')))).reason, 'policy.deadline');
});

test('bytes that are not a sampling request are answered with their JSON-RPC error', async () => {
  const engine = Engine.memory(policy);
  const cases = [
    ['{', -32700],
    ['{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage"}', -32602],
    ['{"jsonrpc":"2.0","id":1,"id":2,"method":"sampling/createMessage","params":{}}', -32600],
  ];
  for (const [bytes, code] of cases) {
    const decision = await engine.decide('open', Buffer.from(bytes));
    assert.equal(decision.kind, 'invalid', bytes);
    assert.equal(decision.error.code, code, bytes);
    assert.equal(decision.params, null);
  }
});

test('decideSync decides a memory engine and refuses a store that does I/O', async (t) => {
  const memory = Engine.memory(policy);
  assert.equal(memory.decideSync('open', request(1, hello())).kind, 'allow');
  const sqlite = await Engine.openSqlite(policy, join(scratch(t), 's.sqlite3'));
  assert.equal(sqlite.store, 'sqlite');
  assert.throws(() => sqlite.decideSync('open', request(1, hello())), {
    code: 'binding.store_is_async',
  });
});

test('a store that cannot be opened rejects with the store\'s code', async (t) => {
  const dir = scratch(t);
  await assert.rejects(Engine.openSqlite(policy, join(dir, 'missing', 'dir', 's.sqlite3')), (error) => {
    assert.match(error.code, /^store\./);
    return true;
  });
  await assert.rejects(Engine.openPostgres(policy, 'not a url at all ://'), (error) => {
    assert.match(error.code, /^store\./);
    return true;
  });
});

test('arguments of the wrong type throw with Node-API\'s status, they do not crash the process', () => {
  assert.throws(() => Policy.fromJson(42), { code: 'InvalidArg' });
  assert.throws(() => Engine.memory({}), { code: 'InvalidArg' });
  assert.throws(() => Engine.memory(policy).decideSync(1, '{}'), { code: 'StringExpected' });
});
