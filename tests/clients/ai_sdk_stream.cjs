// Reads one streamed chat completion through the Vercel AI SDK (what OpenCode uses) and prints, as JSON, the
// tool calls and the text the SDK parsed. Usage: node ai_sdk_stream.cjs NODE_MODULES_DIR BASE_URL MODEL SESSION
const path = require("path");
const { createRequire } = require("module");
const [modules, baseURL, model, session] = process.argv.slice(2);
const load = createRequire(path.join(modules, "noop.js"));
const { streamText, jsonSchema } = load("ai");
const { createOpenAICompatible } = load("@ai-sdk/openai-compatible");

async function main() {
  const provider = createOpenAICompatible({ name: "proxy", baseURL, headers: { "x-session-id": session } });
  const result = streamText({
    model: provider(model),
    prompt: "go",
    tools: { bash: { description: "run", inputSchema: jsonSchema({ type: "object",
      properties: { command: { type: "string" } }, required: ["command"] }) } },
    maxRetries: 0,
    onError: () => {},
  });
  const calls = [];
  let text = "";
  try {
    for await (const part of result.fullStream) {
      if (part.type === "tool-call") calls.push({ name: part.toolName, input: part.input });
      if (part.type === "text-delta") text += part.text ?? part.delta ?? "";
      if (part.type === "tool-input-delta") calls.push({ name: "partial", input: part.delta });
    }
  } catch (err) {
    calls.push({ name: "error", input: String(err).slice(0, 200) });
  }
  process.stdout.write(JSON.stringify({ calls, text }));
}
main();
