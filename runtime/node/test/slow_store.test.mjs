// The event loop never waits on the store: while a decision waits on a
// store that another process holds locked, timers keep firing on time and
// other work goes on. Store calls run on libuv's thread pool (src/lib.rs).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Engine, Policy } from '../index.js';
import { casesPath, scratch } from './support.mjs';
import { postgresOrSkip, withSchema } from './postgres.mjs';

const policy = Policy.fromJson(readFileSync(casesPath('adapters', 'policy.table.json')));
const HOLD_MS = 1500;

function request(text) {
  return JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'sampling/createMessage',
    params: {
      messages: [{ role: 'user', content: { type: 'text', text } }],
      maxTokens: 10,
      includeContext: 'none',
    },
  });
}

/** Runs `command`, resolves once it printed `locked`; the child holds its lock for HOLD_MS. */
async function holdLock(command, args, t) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => child.kill());
  let out = '';
  child.stdout.setEncoding('utf8');
  while (!out.includes('locked')) {
    const [chunk] = await Promise.race([
      once(child.stdout, 'data'),
      once(child, 'exit').then(() => {
        throw new Error(`${command} exited before taking its lock: ${out}`);
      }),
    ]);
    out += chunk;
  }
  return child;
}

/** Runs `work` while a 10 ms timer ticks: how long it took, and the loop's longest gap. */
async function whileTicking(work) {
  let ticks = 0;
  let longestGap = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    longestGap = Math.max(longestGap, now - last);
    last = now;
    ticks += 1;
  }, 10);
  const started = performance.now();
  const value = await work();
  const waited = performance.now() - started;
  // One more turn of the loop, so a stall just before the end shows as a gap.
  await new Promise((resolve) => setTimeout(resolve, 15));
  clearInterval(timer);
  return { value, waited, ticks, longestGap };
}

/**
 * Decides while the store is locked: the decision waited (the lock was
 * real), the loop's timer never did.
 */
async function decideWhileLocked(engine, text) {
  const { value, waited, ticks, longestGap } = await whileTicking(() =>
    engine.decide('open', request(text)),
  );
  assert.ok(waited >= HOLD_MS / 2, `the store was not slow (${waited} ms)`);
  assert.ok(ticks >= waited / 10 / 4, `${ticks} ticks in ${waited} ms`);
  assert.ok(longestGap < waited / 3, `the loop stalled ${longestGap} ms of ${waited} ms`);
  return value;
}

test('the measure sees a loop that waits (its control: a blocking wait)', async () => {
  const { waited, longestGap } = await whileTicking(async () => {
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, HOLD_MS);
  });
  assert.ok(longestGap >= waited / 3, `a blocking wait went unseen (${longestGap} ms)`);
});

test('an SQLite store locked by another process does not stall the event loop', async (t) => {
  const path = join(scratch(t), 'locked.sqlite3');
  const engine = await Engine.openSqlite(policy, path);
  assert.equal((await engine.decide('open', request('warm up'))).kind, 'allow');
  const python = process.env.MCPOLICY_PYTHON ?? 'python3';
  const script = [
    'import sqlite3, sys, time',
    'db = sqlite3.connect(sys.argv[1], isolation_level=None)',
    "db.execute('BEGIN EXCLUSIVE')",
    "print('locked', flush=True)",
    `time.sleep(${HOLD_MS / 1000})`,
    "db.execute('COMMIT')",
  ].join('\n');
  await holdLock(python, ['-c', script, path], t);
  const decision = await decideWhileLocked(engine, 'while locked');
  // The store's busy timeout outlasts the lock: decided once it was released.
  assert.equal(decision.kind, 'allow');
});

test('a PostgreSQL store behind a held lock does not stall the event loop', async (t) => {
  const url = postgresOrSkip(t);
  if (!url) return;
  const { spec, schema } = withSchema(url, t);
  const engine = await Engine.openPostgres(policy, spec);
  assert.equal(engine.store, 'postgres');
  assert.equal((await engine.decide('open', request('warm up'))).kind, 'allow');
  const lock = `BEGIN; LOCK TABLE ${schema}.decisions, ${schema}.counters IN ACCESS EXCLUSIVE MODE; SELECT 'locked'`;
  const hold = `SELECT pg_sleep(${HOLD_MS / 1000}); COMMIT`;
  await holdLock('psql', [url, '-X', '-q', '-At', '-c', lock, '-c', hold], t);
  const decision = await decideWhileLocked(engine, 'while locked');
  assert.equal(decision.kind, 'allow');
});
