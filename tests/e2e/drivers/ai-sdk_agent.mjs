// An agent built with the Vercel AI SDK the way its docs build one: a ToolLoopAgent over
// @ai-sdk/openai-compatible with a bash tool and a read tool of its own (zod input schemas), run streamed
// (`agent.stream`) or whole (`agent.generate`).
// Usage: node ai-sdk_agent.mjs NODE_MODULES BASE_URL MODEL PROJECT PROMPT stream|generate
// Prints one JSON line: the answer's text, and each step's text and the tools it called.
import { execFile } from "child_process";
import { readFile } from "fs/promises";
import { createRequire } from "module";
import path from "path";

const [modules, baseURL, modelId, project, prompt, mode] = process.argv.slice(2);
const require = createRequire(path.join(modules, "driver.js"));
const { ToolLoopAgent, stepCountIs, tool } = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { z } = require("zod");

const provider = createOpenAICompatible({ name: "allowlist-proxy", baseURL, apiKey: "none" });

function run(command) {
  return new Promise((resolve) => {
    execFile("bash", ["-c", command], { cwd: project }, (error, stdout, stderr) => {
      resolve(`${stdout}${stderr}${error ? `\nexit code ${error.code}` : ""}`);
    });
  });
}

const agent = new ToolLoopAgent({
  model: provider(modelId),
  instructions: "You are a careful coding agent working in a project.",
  tools: {
    bash: tool({
      description: "Run a shell command in the project",
      inputSchema: z.object({ command: z.string().describe("the command line") }),
      execute: async ({ command }) => run(command),
    }),
    readFile: tool({
      description: "Read a text file",
      inputSchema: z.object({ path: z.string().describe("the file's path") }),
      execute: async ({ path: file }) => readFile(file, "utf8"),
    }),
  },
  stopWhen: stepCountIs(8),
});

let text = "";
let steps;
if (mode === "generate") {
  const result = await agent.generate({ prompt });
  ({ text, steps } = result);
} else {
  const result = await agent.stream({ prompt });
  for await (const delta of result.textStream) text += delta;
  steps = await result.steps;
}
const calls = steps.map((step) => step.toolCalls.map((call) => call.toolName));
console.log(JSON.stringify({ text, steps: calls, texts: steps.map((step) => step.text) }));
