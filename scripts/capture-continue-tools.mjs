// Reads the built-in tool definitions of the Continue CLI from its published package sources
// (`npm pack @continuedev/cli@VERSION`, unpacked) and prints them as a client_tools catalogue.
// Usage: node scripts/capture-continue-tools.mjs PACKAGE_DIR > tests/policy/client_tools/continue.json
import fs from "fs";
import path from "path";

const dir = process.argv[2];
const pkg = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8"));
const toolsDir = path.join(dir, "src", "tools");

function balanced(text, start) {
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}" && --depth === 0) return text.slice(start, i + 1);
  }
  return null;
}

const tools = [];
for (const file of fs.readdirSync(toolsDir).sort()) {
  if (!file.endsWith(".ts") || file.includes(".test.")) continue;
  const text = fs.readFileSync(path.join(toolsDir, file), "utf8");
  const re = /\n  name: "([^"]+)",[\s\S]*?\n  parameters: \{/g;
  let m;
  while ((m = re.exec(text))) {
    const body = balanced(text, m.index + m[0].length - 1);
    try {
      const parameters = new Function(`return (${body.replace(/ as const/g, "")});`)();
      tools.push({ type: "function", function: { name: m[1], parameters } });
    } catch (e) {
      tools.push({ type: "function", function: { name: m[1], parameters: null }, note: `unparsed: ${e}` });
    }
  }
}
console.log(JSON.stringify({
  client: `Continue CLI ${pkg.version} (${pkg.name})`,
  route: "chat",
  user_agent: null,
  session_header: null,
  note: `Read from ${pkg.name}@${pkg.version} src/tools/*.ts (the built-in tools' parameter schemas), by scripts/capture-continue-tools.mjs.`,
  tools,
}, null, 1));
