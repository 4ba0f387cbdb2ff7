// End to end with the real SDK: @modelcontextprotocol/server-everything
// (its `trigger-sampling-request` tool sends sampling/createMessage) over
// stdio, driven by the SDK's own Client with the adapter installed. Both
// packages are pinned in package-lock.json. The policy is the adapter
// contract's (tests/cases/adapters/policy.mcpolicy): the server is given the
// id of the block each case exercises, as a user names it in a client's
// configuration.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

import { Engine, Policy } from '../index.js';
import { installSampling } from '../sdk.js';
import { casesPath, scratch } from './support.mjs';

const require = createRequire(import.meta.url);
const everything = require.resolve('@modelcontextprotocol/server-everything/dist/index.js');
const policy = Policy.fromJson(readFileSync(casesPath('adapters', 'policy.table.json')));

/** A client connected to a fresh server-everything, the policy installed for `server`. */
async function connect(t, engine, server, { consent } = {}) {
  const seen = { calls: [], asked: 0 };
  const client = new Client(
    { name: 'mcpolicy-node-e2e', version: '1.0.0' },
    { capabilities: { sampling: {} } },
  );
  const stats = installSampling(client, {
    engine,
    server,
    handler: async (request) => {
      seen.calls.push(request.params);
      return {
        role: 'assistant',
        content: { type: 'text', text: `answered ${request.params.maxTokens}` },
        model: 'test-model',
        stopReason: 'endTurn',
      };
    },
    consent: async () => {
      seen.asked += 1;
      return consent === true;
    },
    usage: () => 7,
  });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [everything, 'stdio'],
    stderr: 'ignore',
  });
  await client.connect(transport);
  t.after(() => client.close());
  return { client, seen, stats };
}

/** Calls the tool; resolves to the sampling result it reports, or its error text. */
async function trigger(client, prompt, maxTokens) {
  const answer = await client.callTool({
    name: 'trigger-sampling-request',
    arguments: { prompt, maxTokens },
  });
  const text = answer.content.map((part) => part.text).join('\n');
  if (answer.isError) return { error: text };
  const json = text.slice(text.indexOf('{'));
  return { result: JSON.parse(json) };
}

test('server-everything: allowed as asked', async (t) => {
  const { client, seen, stats } = await connect(t, Engine.memory(policy), 'open');
  const { tools } = await client.listTools();
  assert.ok(tools.some((tool) => tool.name === 'trigger-sampling-request'));
  const { result, error } = await trigger(client, 'hello', 100);
  assert.equal(error, undefined);
  assert.equal(result.content.text, 'answered 100');
  assert.equal(result._meta, undefined);
  assert.equal(seen.calls.length, 1);
  assert.equal(seen.calls[0].systemPrompt, 'You are a helpful test server.');
  assert.equal(stats.allowed, 1);
});

test('server-everything: trimmed, and the result says so in _meta', async (t) => {
  const { client, seen, stats } = await connect(t, Engine.memory(policy), 'summarizer');
  const { result } = await trigger(client, 'summarise', 9000);
  assert.equal(seen.calls[0].maxTokens, 256);
  assert.equal(result.content.text, 'answered 256');
  assert.deepEqual(result._meta, {
    maxTokens: { requested: 9000, applied: 256, reason: 'policy.max_tokens' },
  });
  assert.equal(stats.trimmed, 1);
});

test('server-everything: denied with the frame, the handler never called', async (t) => {
  const engine = Engine.memory(policy);
  const { client, seen, stats } = await connect(t, engine, 'closed');
  const { error } = await trigger(client, 'hello', 100);
  // The server's SDK reports the error it received: code and message.
  const frame = (
    await engine.decide(
      'closed',
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'sampling/createMessage',
        params: { messages: [], maxTokens: 1 },
      }),
    )
  ).error;
  assert.ok(error.includes(`${frame.code}`), error);
  assert.ok(error.includes(frame.message), error);
  assert.equal(seen.calls.length, 0);
  assert.equal(stats.denied, 1);
});

test('server-everything: a refused consent is remembered, also across a restart', async (t) => {
  const path = join(scratch(t), 'decisions.sqlite3');
  const first = await connect(t, await Engine.openSqlite(policy, path), 'asked', { consent: false });
  assert.match((await trigger(first.client, 'read my mail', 100)).error, /-1/);
  assert.match((await trigger(first.client, 'read my mail', 100)).error, /-1/);
  assert.equal(first.seen.asked, 1, 'asked once');
  assert.equal(first.seen.calls.length, 0);
  await first.client.close();

  const again = await connect(t, await Engine.openSqlite(policy, path), 'asked', { consent: true });
  assert.match((await trigger(again.client, 'read my mail', 100)).error, /-1/);
  assert.equal(again.seen.asked, 0, 'the refusal was replayed from the store');
  // Another request is asked for, approved, and the approval remembered.
  assert.equal((await trigger(again.client, 'summarise my day', 100)).result.content.text, 'answered 100');
  assert.equal((await trigger(again.client, 'summarise my day', 100)).result.content.text, 'answered 100');
  assert.equal(again.seen.asked, 1);
});

test('server-everything: a day\'s budget holds across a client restart on the same SQLite file', async (t) => {
  const path = join(scratch(t), 'decisions.sqlite3');
  const first = await connect(t, await Engine.openSqlite(policy, path), 'daily');
  assert.equal((await trigger(first.client, 'first', 100)).result.content.text, 'answered 100');
  await first.client.close();

  const again = await connect(t, await Engine.openSqlite(policy, path), 'daily');
  const { error } = await trigger(again.client, 'second', 100);
  assert.match(error, /-32010/);
  assert.match(error, /budget/);
  assert.equal(again.seen.calls.length, 0);
});
