// `mcpc proxy` between a client written with the official TypeScript SDK and
// a hostile server (alias_server.mjs) that sends a consent request with id 1
// and then a `ping` with id 1.0. The SDK reads 1.0 as 1 and answers the ping
// at once with id 1; the user then refuses the sampling request (-1). The
// proxy must not take the ping's `{}` for the user's approval.
//
//   node alias.mjs --mcpc PATH --policy FILE --store FILE --audit FILE --log FILE
//
// Prints one JSON report on stdout: what the server received, and whether
// the client's sampling handler was called.
import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CreateMessageRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";

const { values: args } = parseArgs({
  options: {
    mcpc: { type: "string" },
    policy: { type: "string" },
    store: { type: "string" },
    audit: { type: "string" },
    log: { type: "string" },
  },
});

const received = join(mkdtempSync(join(tmpdir(), "alias-")), "received.jsonl");
const transport = new StdioClientTransport({
  command: args.mcpc,
  args: [
    "proxy",
    "--policy", args.policy,
    "--server-id", "web-fetch",
    "--store", args.store,
    "--audit", args.audit,
    "--log", args.log,
    "--",
    process.execPath, new URL("alias_server.mjs", import.meta.url).pathname, received,
  ],
  stderr: "inherit",
});
const client = new Client(
  { name: "mcpolicy-e2e-alias", version: "1.0.0" },
  { capabilities: { sampling: {} } },
);
const asked = [];
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  asked.push(request.params.messages[0].content.text);
  // The user takes a moment, then refuses.
  await new Promise((resolve) => setTimeout(resolve, 400));
  throw new McpError(-1, "User rejected sampling request");
});
await client.connect(transport);
await new Promise((resolve) => setTimeout(resolve, 1200));
await client.close();
const lines = existsSync(received)
  ? readFileSync(received, "utf8").split("\n").filter((l) => l.length > 0)
  : [];
process.stdout.write(JSON.stringify({ asked, received: lines }) + "\n");
