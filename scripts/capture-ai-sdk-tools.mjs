// The tools a Vercel AI SDK agent offers, as the SDK itself sends them: typical tools written the SDK's
// way (zod input schemas, optional arguments) passed to generateText with @ai-sdk/openai-compatible, whose
// request is caught by a capture server on 127.0.0.1. Run from the directory holding the SDK:
//   NODE_PATH=~/.cache/allowlist-proxy-ai-sdk/node_modules node scripts/capture-ai-sdk-tools.mjs > OUT.json
import http from "http";
import { createRequire } from "module";
import path from "path";

const require = createRequire(path.join(process.env.NODE_PATH, "x.js"));
const { generateText, tool } = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { z } = require("zod");
const version = require("ai/package.json").version;
const providerVersion = require("@ai-sdk/openai-compatible/package.json").version;

let captured = null;
let agent = null;
const server = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    captured = JSON.parse(body);
    agent = req.headers["user-agent"] || null;
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ id: "x", object: "chat.completion", created: 0, model: "m",
      choices: [{ index: 0, message: { role: "assistant", content: "done" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
  });
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const provider = createOpenAICompatible({ name: "capture", baseURL: `http://127.0.0.1:${server.address().port}/v1` });
const tools = {
  bash: tool({ description: "Run a shell command in the sandbox",
    inputSchema: z.object({ command: z.string(), cwd: z.string().optional() }), execute: async () => "" }),
  readFile: tool({ description: "Read a file",
    inputSchema: z.object({ path: z.string(), encoding: z.enum(["utf8", "base64"]).optional() }), execute: async () => "" }),
  writeFile: tool({ description: "Write a file",
    inputSchema: z.object({ path: z.string(), content: z.string() }), execute: async () => "" }),
  fetchUrl: tool({ description: "Fetch a web page",
    inputSchema: z.object({ url: z.string().url() }), execute: async () => "" }),
  updateTodos: tool({ description: "Update the todo list",
    inputSchema: z.object({ items: z.array(z.object({ text: z.string(), done: z.boolean() })) }), execute: async () => "" }),
  askUser: tool({ description: "Ask the user a question",
    inputSchema: z.object({ question: z.string(), choices: z.array(z.string()).nullable() }), execute: async () => "" }),
};
await generateText({ model: provider.chatModel("m"), prompt: "hi", tools });
server.close();
console.log(JSON.stringify({
  client: `Vercel AI SDK ai@${version} with @ai-sdk/openai-compatible@${providerVersion}`,
  route: "chat", user_agent: agent, session_header: null,
  note: `Tools defined the SDK's way (tool() with zod input schemas) by scripts/capture-ai-sdk-tools.mjs; the request ai@${version} sent was caught by a capture server on 127.0.0.1.`,
  tools: captured.tools,
}, null, 1));
