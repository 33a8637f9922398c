// An MCP client we did not write: the TypeScript SDK's own Client over streamable HTTP,
// driven by a script of steps (argv[4], JSON) so the integration suite can check what a
// third-party client sees of the gateway. One JSON line per answer on stdout:
//   {"op":"list","tools":[...]}            tools/list (whole tool objects)
//   {"op":"call","result":{...}}          tools/call answered with a result
//   {"op":"call","error":{code,message,data}}  tools/call answered with a JSON-RPC error
//   {"op":"wait"}                         then reads one line from stdin before going on
// Usage: node client.mjs URL TOKEN '[{"op":"list"},{"op":"call","name":"t","arguments":{}}]' [--url-elicitation]
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, script, flag] = process.argv.slice(2);
const steps = JSON.parse(script);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const capabilities = flag === "--url-elicitation" ? { elicitation: { url: {} } } : {};
const client = new Client({ name: "tooladapter-ts-interop", version: "1.0.0" }, { capabilities });
await client.connect(transport);
say({ op: "connected", protocolVersion: transport.protocolVersion ?? null });
for (const step of steps) {
  if (step.op === "list") {
    say({ op: "list", tools: (await client.listTools()).tools });
  } else if (step.op === "call") {
    try {
      const result = await client.callTool({ name: step.name, arguments: step.arguments ?? {} });
      say({ op: "call", result });
    } catch (err) {
      say({ op: "call", error: { code: err.code ?? null, message: String(err.message), data: err.data ?? null } });
    }
  } else if (step.op === "wait") {
    say({ op: "wait" });
    await lines.next();
  }
}
await client.close();
process.exit(0);
