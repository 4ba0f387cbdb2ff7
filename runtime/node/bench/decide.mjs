// The binding's per-decision overhead: the same decisions as
// benches/decide.rs (same table, memory store, same requests), called
// from Node through the addon, synchronously (decideSync: the crossing
// alone) and as Promises (decide: the crossing plus libuv's thread pool).
// Prints one JSON line of medians (ns per decision); BENCHMARKS.md has the figures.
//
//   npm run build && node bench/decide.mjs
import { readFileSync } from 'node:fs';

import { Engine, Policy } from '../index.js';

const BATCH = 1000;
const BATCHES = 30;

const policy = Policy.fromJson(
  readFileSync(new URL('../../../tests/cases/adapters/policy.table.json', import.meta.url)),
);
const hello = Buffer.from(
  JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'sampling/createMessage',
    params: {
      messages: [{ role: 'user', content: { type: 'text', text: 'Hello' } }],
      maxTokens: 100,
      includeContext: 'none',
    },
  }),
);

function median(means) {
  means.sort((a, b) => a - b);
  return Math.round(means[BATCHES >> 1]);
}

/** CPU ns of this process (user + system, every thread) since `start`. */
function cpuNs(start) {
  const { user, system } = process.cpuUsage(start);
  return (user + system) * 1000;
}

// The median over batches of the mean wall ns per call, and the process's
// CPU ns per call over all of them (GC and libuv's pool included).
function medianNsSync(decide) {
  const cpu = process.cpuUsage();
  const means = [];
  for (let batch = 0; batch < BATCHES; batch++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < BATCH; i++) decide(batch * BATCH + i);
    means.push(Number(process.hrtime.bigint() - started) / BATCH);
  }
  return [median(means), Math.round(cpuNs(cpu) / (BATCH * BATCHES))];
}

async function medianNs(decide) {
  const cpu = process.cpuUsage();
  const means = [];
  for (let batch = 0; batch < BATCHES; batch++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < BATCH; i++) await decide(batch * BATCH + i);
    means.push(Number(process.hrtime.bigint() - started) / BATCH);
  }
  return [median(means), Math.round(cpuNs(cpu) / (BATCH * BATCHES))];
}

const sync = Engine.memory(policy);
const [fresh_allow_sync_ns, fresh_allow_sync_cpu_ns] = medianNsSync((i) => sync.decideSync(`srv-${i}`, hello).kind);
const [replayed_deny_sync_ns, replayed_deny_sync_cpu_ns] = medianNsSync(() => sync.decideSync('closed', hello).kind);
const pooled = Engine.memory(policy);
const [fresh_allow_async_ns, fresh_allow_async_cpu_ns] = await medianNs(async (i) => (await pooled.decide(`srv-${i}`, hello)).kind);
const [replayed_deny_async_ns, replayed_deny_async_cpu_ns] = await medianNs(async () => (await pooled.decide('closed', hello)).kind);

console.log(
  JSON.stringify({
    side: 'node',
    fresh_allow_sync_ns,
    replayed_deny_sync_ns,
    fresh_allow_async_ns,
    replayed_deny_async_ns,
    fresh_allow_sync_cpu_ns,
    replayed_deny_sync_cpu_ns,
    fresh_allow_async_cpu_ns,
    replayed_deny_async_cpu_ns,
  }),
);
