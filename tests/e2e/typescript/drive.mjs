// `mcpc proxy` between `@modelcontextprotocol/server-everything` and a client
// written with the official TypeScript SDK (both pinned in package.json).
//
// The server's `trigger-sampling-request-async` tool asks the client to run
// sampling as an MCP 2025-11-25 task (`params.task`); this client creates the
// task and fails it as the user's refusal ("User rejected sampling request").
// The same tool call again must be refused from the proxy's store: the
// client's sampling handler is not called a second time.
//
//   node drive.mjs --mcpc PATH --policy FILE --store FILE --audit FILE --log FILE
//
// Prints one JSON report on stdout; cli/tests/proxy_typescript.rs asserts on it.
import { createRequire } from "node:module";
import { parseArgs } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { InMemoryTaskStore } from "@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js";
import { CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const { values: args } = parseArgs({
  options: {
    mcpc: { type: "string" },
    policy: { type: "string" },
    store: { type: "string" },
    audit: { type: "string" },
    log: { type: "string" },
  },
});

const require = createRequire(import.meta.url);
const everything = require.resolve("@modelcontextprotocol/server-everything/dist/index.js");

const transport = new StdioClientTransport({
  command: args.mcpc,
  args: [
    "proxy",
    "--policy", args.policy,
    "--server-id", "everything",
    "--store", args.store,
    "--audit", args.audit,
    "--log", args.log,
    "--",
    process.execPath, everything, "stdio",
  ],
  stderr: "inherit",
});

const client = new Client(
  { name: "mcpolicy-e2e", version: "1.0.0" },
  {
    capabilities: {
      sampling: {},
      tasks: { requests: { sampling: { createMessage: {} } } },
    },
    taskStore: new InMemoryTaskStore(),
  },
);

const asked = [];
client.setRequestHandler(CreateMessageRequestSchema, async (request, extra) => {
  asked.push({ task: request.params.task ?? null, text: request.params.messages?.[0]?.content?.text });
  if (!request.params.task || !extra.taskStore) {
    // Not run as a task: the user refuses in the dialog (MCP's -1).
    const error = new Error("User rejected sampling request");
    error.code = -1;
    throw error;
  }
  const task = await extra.taskStore.createTask({ ttl: extra.taskRequestedTtl ?? 60000 });
  // The user looks at the dialog, then refuses: the task fails.
  setTimeout(() => {
    extra.taskStore
      .updateTaskStatus(task.taskId, "failed", "User rejected sampling request")
      .catch((e) => console.error("updating the task failed:", e));
  }, 100);
  return { task };
});

const report = { tools: [], calls: [], asked };
try {
  await client.connect(transport);
  report.tools = (await client.listTools()).tools.map((t) => t.name);
  for (let i = 0; i < 2; i++) {
    const started = Date.now();
    try {
      const result = await client.callTool(
        { name: "trigger-sampling-request-async", arguments: { prompt: "summarise the release", maxTokens: 50 } },
        undefined,
        { timeout: 30000 },
      );
      report.calls.push({ result, ms: Date.now() - started });
    } catch (error) {
      report.calls.push({ error: { code: error.code, message: String(error.message) }, ms: Date.now() - started });
    }
  }
} finally {
  await client.close().catch(() => {});
}
// The task store keeps a ttl timer alive: exit once the report is out.
process.stdout.write(JSON.stringify(report) + "\n", () => process.exit(0));
