// Runs the XML parser of a published `cline` release (its bundled dist/lib.mjs, unchanged) on texts: reads a JSON
// array of strings on stdin, writes a JSON array of the tool uses each parses to ({name, params, partial}).
// The parser is not exported by the bundle, so it is found by what it does: the function that maps every tool
// name to `<name>` and every parameter name to `<name>` before scanning. Its tool names come from the release's
// own tool enum, its parameter names from its own list; nothing of the release is rewritten.
import { readFileSync } from "node:fs";

const [lib] = process.argv.slice(2);
const source = readFileSync(lib, "utf8");

const head = /function (\w+)\((\w+)\)\{let [^{]*?for\(let (\w+) of (\w+)\(\)\)(\w+)\.set\(`<\$\{\3\}>`,\3\);for\(let (\w+) of (\w+)\)/;
const found = head.exec(source);
if (!found) throw new Error("the parser was not found in " + lib);
const [, , , , toolsFn, , , paramsName] = found;

function balanced(text, open) {  // the source from `open` to its matching closing brace
  let depth = 0;
  for (let i = text.indexOf("{", open); i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}" && --depth === 0) return text.slice(open, i + 1);
  }
  throw new Error("unbalanced source");
}

const parser = balanced(source, found.index);
const params = JSON.parse(new RegExp(`[,; ]${paramsName}=(\\[[^\\]]*\\])`).exec(source)[1]);
// The tool enum: `X=(v=>(v.ASK="ask_followup_question",...,v))(X||{})`, whose values the tools function lists.
const toolsBody = balanced(source, source.indexOf(`function ${toolsFn}(`));
const valuesOf = /\[\.\.\.(\w+)\]/.exec(toolsBody)[1];
const enumName = new RegExp(`[,; ]${valuesOf}=Object\\.values\\((\\w+)\\)`).exec(source)[1];
const enumStart = source.indexOf(`${enumName}=(v=>(`);
const enumEnd = source.indexOf(`))(${enumName}||{})`, enumStart);
const tools = Object.values(new Function(`return ${source.slice(enumStart + enumName.length + 1, enumEnd + 2)}({})`)());

const idFn = /call_id:(\w+)\(/.exec(parser);  // the id a tool use gets: not the parser's concern here
const parse = new Function(toolsFn, paramsName, idFn ? idFn[1] : "_unused", `return (${parser})`)(
  () => tools, params, () => "id");
const texts = JSON.parse(readFileSync(0, "utf8"));
const out = texts.map((text) => parse(text).filter((b) => b.type === "tool_use")
  .map((b) => ({ name: b.name, params: b.params, partial: b.partial })));
process.stdout.write(JSON.stringify({ tools, params, parsed: out }));
