// Shared by the tests: the repository's paths, a scratch directory, and an
// SDK Client connected to a scripted server in memory, so a test sends
// sampling requests exactly as a server's transport delivers them.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';

export const repo = fileURLToPath(new URL('../../../', import.meta.url));

export function casesPath(...parts) {
  return join(repo, 'tests', 'cases', ...parts);
}

/** A scratch directory removed when the test ends. */
export function scratch(t) {
  const dir = mkdtempSync(join(tmpdir(), 'mcpolicy-node-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A Client (sampling capability declared) connected to a server side that
 * answers `initialize` and lets the test send requests to the client.
 * `install(client)` runs before connecting.
 */
export async function scriptedServer(install) {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const waiting = new Map();
  serverSide.onmessage = (message) => {
    if (message.method === 'initialize') {
      void serverSide.send({
        jsonrpc: '2.0',
        id: message.id,
        result: {
          protocolVersion: message.params.protocolVersion,
          capabilities: {},
          serverInfo: { name: 'scripted', version: '1.0.0' },
        },
      });
      return;
    }
    if (message.id !== undefined && waiting.has(message.id)) {
      waiting.get(message.id)(message);
      waiting.delete(message.id);
    }
  };
  await serverSide.start();
  const client = new Client(
    { name: 'mcpolicy-node-test', version: '1.0.0' },
    { capabilities: { sampling: {} } },
  );
  install(client);
  await client.connect(clientSide);
  let next = 1000;
  return {
    client,
    /** Sends sampling/createMessage with `params`; resolves to the client's JSON-RPC response. */
    sample(params) {
      const id = next++;
      const answered = new Promise((resolve) => waiting.set(id, resolve));
      void serverSide.send({ jsonrpc: '2.0', id, method: 'sampling/createMessage', params });
      return answered;
    },
    async close() {
      await client.close();
    },
  };
}

/** What the scenarios' sampling callback returns. */
export function completion() {
  return {
    role: 'assistant',
    content: { type: 'text', text: 'ok' },
    model: 'test-model',
    stopReason: 'endTurn',
  };
}

/** Resolves after `ms`, or rejects when `signal` aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });
}
