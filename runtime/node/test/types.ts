// Compiled by `npm run typecheck` (tsc, never run): the package's types
// (index.d.ts, native.d.ts, sdk.d.ts) as a TypeScript client uses them.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CreateMessageResult } from '@modelcontextprotocol/sdk/types.js';

import { Decision, Engine, Policy, loadPolicy, requestIdentity } from '../index.js';
import { frameError, installSampling, type SamplingStats } from '../sdk.js';

export async function typed(): Promise<SamplingStats> {
  const policy: Policy = loadPolicy('policy.table.json');
  const memory: Engine = Engine.memory(policy);
  const sqlite: Engine = await Engine.openSqlite(policy, 'decisions.sqlite3');
  const decision: Decision = await sqlite.decide('srv', '{}', false);
  const kind: 'allow' | 'trim' | 'consent' | 'deny' | 'invalid' | 'failed' = decision.kind;
  if (decision.error) {
    const code: number = decision.error.code;
    throw frameError({ code, message: decision.error.message, data: decision.error.data });
  }
  if (kind === 'consent') await (await decision.approve()).complete(12);
  const ms: number | null = decision.deadlineMs;
  const id: string = requestIdentity('srv', { messages: [] }, ['messages']);
  void [ms, id, memory.decideSync('srv', Buffer.from('{}'))];

  const client = new Client({ name: 'c', version: '1' }, { capabilities: { sampling: {} } });
  return installSampling(client, {
    engine: sqlite,
    server: 'srv',
    handler: async (request, extra): Promise<CreateMessageResult> => {
      extra.signal.throwIfAborted();
      return {
        role: 'assistant',
        model: 'm',
        content: { type: 'text', text: String(request.params.maxTokens) },
      };
    },
    consent: async ({ server, params }) => server === 'srv' && params !== null,
    usage: (result) => (result.model === 'm' ? 1 : undefined),
  });
}
