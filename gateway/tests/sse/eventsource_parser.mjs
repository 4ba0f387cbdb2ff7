// The reader the TypeScript SDK's StreamableHTTPClientTransport uses: the
// bytes through a streaming TextDecoder (TextDecoderStream: UTF-8, a leading
// BOM dropped, bad bytes replaced), then `eventsource-parser`'s createParser.
// gateway/tests/sse_differential.rs compares the gateway's parser with it.
//
//   node eventsource_parser.mjs NODE_MODULES < cases.json > results.json
//
// cases: [{"raw": [bytes], "splits": [byte offsets], "canonical": [bytes]}]
// results: [{"raw": READ, "canonical": READ}], READ = {"events": [{id, event,
// data}], "retries": [n]} (absent fields are null).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
const { createParser } = await import(pathToFileURL(join(modules, "eventsource-parser/dist/index.js")).href);

function read(bytes, splits) {
  const events = [];
  const retries = [];
  const parser = createParser({
    onEvent: (e) => events.push({ id: e.id ?? null, event: e.event ?? null, data: e.data }),
    onRetry: (n) => retries.push(n),
  });
  const decoder = new TextDecoder();
  let at = 0;
  for (const end of [...splits, bytes.length]) {
    const text = decoder.decode(bytes.subarray(at, end), { stream: true });
    if (text !== "") parser.feed(text);
    at = end;
  }
  const rest = decoder.decode();
  if (rest !== "") parser.feed(rest);
  return { events, retries };
}

const cases = JSON.parse(readFileSync(0, "utf8"));
const results = cases.map((c) => ({
  raw: read(Uint8Array.from(c.raw), c.splits),
  canonical: read(Uint8Array.from(c.canonical), []),
}));
process.stdout.write(JSON.stringify(results));
