// A client written with the official TypeScript SDK's
// StreamableHTTPClientTransport, talking to `@modelcontextprotocol/server-everything`
// (streamableHttp mode) through `mcpc gateway` (cli/tests/gateway_typescript.rs
// starts both). It calls the server's `trigger-sampling-request` tool
// `--calls` times and answers every sampling request it is shown; at the end
// it DELETEs its session (terminateSession) and checks that the gateway and
// the server forgot it.
//
//   node gateway.mjs --url http://127.0.0.1:PORT/NAME/mcp --calls N --max-tokens M
//                    [--answer complete|refuse] [--delay-ms MS]
//
// `--answer refuse`: the user refuses every request shown (MCP's -1);
// `--delay-ms`: the answer comes that much later (a slow model).
//
// Prints one JSON report on stdout.
import { parseArgs } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    calls: { type: "string", default: "1" },
    "max-tokens": { type: "string", default: "50" },
    answer: { type: "string", default: "complete" },
    "delay-ms": { type: "string", default: "0" },
  },
});

const transport = new StreamableHTTPClientTransport(new URL(args.url));
const client = new Client({ name: "mcpolicy-gateway-e2e", version: "1.0.0" }, { capabilities: { sampling: {} } });

// What the client is shown: each sampling request's params.
const asked = [];
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  asked.push(request.params);
  const delay = Number(args["delay-ms"]);
  if (delay > 0) {
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
  if (args.answer === "refuse") {
    throw new McpError(-1, "User rejected sampling request");
  }
  return {
    model: "test-model",
    role: "assistant",
    content: { type: "text", text: `answer ${asked.length}` },
    stopReason: "endTurn",
  };
});

const report = { tools: [], calls: [], asked, errors: [] };
transport.onerror = (error) => report.errors.push(String(error?.message ?? error));
try {
  await client.connect(transport);
  report.sessionId = transport.sessionId ?? null;
  report.tools = (await client.listTools()).tools.map((t) => t.name);
  for (let i = 0; i < Number(args.calls); i++) {
    try {
      const result = await client.callTool(
        { name: "trigger-sampling-request", arguments: { prompt: `summarise release ${i}`, maxTokens: Number(args["max-tokens"]) } },
        undefined,
        { timeout: 20000 },
      );
      report.calls.push({ result });
    } catch (error) {
      report.calls.push({ error: { code: error.code ?? null, message: String(error.message) } });
    }
  }
  // DELETE: the gateway ends its session; a request on the old id then
  // meets the server's 404 (it forgot the session too).
  await transport.terminateSession();
  report.deleted = transport.sessionId === undefined;
  const after = await fetch(args.url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-session-id": report.sessionId ?? "",
      "mcp-protocol-version": "2025-06-18",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 99, method: "tools/list" }),
  });
  report.afterDelete = after.status;
} finally {
  await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify(report) + "\n", () => process.exit(0));
