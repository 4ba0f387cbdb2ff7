// A client written with the official TypeScript SDK starts one server of an
// MCP client configuration that `mcpc wrap` rewrote, exactly as a client
// would: the entry's `command` and `args`, and its `env` if it has one
// (without `env` the SDK passes only HOME, PATH, SHELL, TERM, USER and
// LOGNAME). The server, @modelcontextprotocol/server-everything, asks for
// sampling; this client answers it.
//
//   node wrapped.mjs --config FILE --name SERVER
//
// Prints one JSON report on stdout; cli/tests/wrap.rs asserts on it.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const { values: args } = parseArgs({
  options: { config: { type: "string" }, name: { type: "string" } },
});

const config = JSON.parse(readFileSync(args.config, "utf8"));
const entry = (config.mcpServers ?? config.servers)[args.name];
const transport = new StdioClientTransport({
  command: entry.command,
  args: entry.args,
  env: entry.env,
  stderr: "inherit",
});

const client = new Client(
  { name: "mcpolicy-wrap-e2e", version: "1.0.0" },
  { capabilities: { sampling: {} } },
);
const asked = [];
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  asked.push(request.params.maxTokens);
  return {
    model: "test-model",
    role: "assistant",
    content: { type: "text", text: "a short summary" },
    stopReason: "endTurn",
  };
});

const report = { command: entry.command, tools: [], calls: [], asked };
try {
  await client.connect(transport);
  report.tools = (await client.listTools()).tools.map((t) => t.name);
  const result = await client.callTool(
    { name: "trigger-sampling-request", arguments: { prompt: "summarise the release", maxTokens: 50 } },
    undefined,
    { timeout: 30000 },
  );
  report.calls.push(result);
} catch (error) {
  report.error = String(error.message ?? error);
} finally {
  await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify(report) + "\n", () => process.exit(0));
