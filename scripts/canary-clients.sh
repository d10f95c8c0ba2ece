#!/usr/bin/env bash
# Run this before updating a client (README "Bound to its project"): installs the newest release of every
# supported agent client into a scratch directory (never the suite's own caches), runs the end-to-end scenarios
# against them, and prints a table: client, version, governed (refused calls never ran, allowed ones did),
# counted (one session, each call and its verdict recorded), root learned from its own text on the shipped
# policy, root bound by a project key, and whether `allowlist-proxy run` started it.
#   CANARY_DIR  the scratch directory (default: a new temporary one, removed at the end unless CANARY_KEEP=1)
#   PYTHON      the project's python (its venv), which runs pytest and the proxy (default: python3)
# Needs npm; exits 1 when any client's newest release is not governed, not counted, or its root is not learned
# (from its text or from a key): that release is not ready to be pinned.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
scratch="${CANARY_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/allowlist-canary-XXXXXX")}"
if [ -z "${CANARY_DIR:-}" ] && [ "${CANARY_KEEP:-}" != "1" ]; then trap 'rm -rf "$scratch"' EXIT; fi
command -v npm >/dev/null 2>&1 || { echo "npm not found: cannot install the clients" >&2; exit 2; }

newest() { npm view "$1" version 2>/dev/null | tail -1; }

# Kilo's CLI names a platform binary of its own version, which is sometimes not published: the newest CLI
# release whose linux binary exists.
kilo_newest() {
  "$python" - "$(npm view @kilocode/cli versions --json 2>/dev/null)" \
    "$(npm view "@kilocode/cli-linux-$(uname -m | sed 's/x86_64/x64/;s/aarch64/arm64/')" versions --json 2>/dev/null)" <<'EOF'
import json, sys
def parsed(text):
    try:
        found = json.loads(text)
    except ValueError:
        return []
    return found if isinstance(found, list) else [found]
binaries = set(parsed(sys.argv[2]))
key = lambda v: tuple(int(p) if p.isdigit() else 0 for p in v.split("-")[0].split("."))
print(next((v for v in sorted(parsed(sys.argv[1]), key=key, reverse=True) if v in binaries), ""))
EOF
}

specs=()
for package in @qwen-code/qwen-code @openai/codex @anthropic-ai/claude-code cline @continuedev/cli; do
  version="$(newest "$package")"
  [ -n "$version" ] && specs+=("$package@$version") || echo "$package: no version on the registry" >&2
done
kilo="$(kilo_newest)"
[ -n "$kilo" ] && specs+=("@kilocode/cli@$kilo") || echo "@kilocode/cli: no release with a linux binary" >&2
echo "installing into $scratch: ${specs[*]}" >&2
AGENT_CLIS_CACHE="$scratch/clis" bash "$repo/scripts/install-agent-clis.sh" "${specs[@]}" >&2
OPENCODE_VERSION="$(newest opencode-ai)" OPENCODE_CACHE="$scratch/opencode" \
  bash "$repo/scripts/install-opencode.sh" >&2
AGENT_PYS_NEWEST=1 AGENT_PYS_CACHE="$scratch/pys" bash "$repo/scripts/install-agent-pys.sh" >&2

facts="$scratch/facts.jsonl"
: > "$facts"
(cd "$repo" && E2E_ANY_VERSION=1 E2E_FACTS="$facts" AGENT_CLIS_CACHE="$scratch/clis" \
  OPENCODE_CACHE="$scratch/opencode" AGENT_PYS_CACHE="$scratch/pys" \
  "$python" -m pytest -n 0 -q -p no:randomly --junitxml="$scratch/results.xml" \
    "tests/e2e/test_clients.py::test_agent_cli_reads_its_own_project_on_the_shipped_policy" \
    tests/e2e/test_keyed_clients.py tests/e2e/test_pypi_clients.py tests/e2e/test_sdk_agents.py >&2)

"$python" - "$facts" "$scratch/results.xml" <<'EOF'
import json, sys
import xml.etree.ElementTree as ET

rows = {}
for line in open(sys.argv[1], encoding="utf-8"):
    fact = json.loads(line)
    row = rows.setdefault(fact["client"], {"version": fact["version"]})
    for name in ("governed", "counted", "root_from_text", "root_from_key"):
        if isinstance(fact.get(name), str):  # not judged by design (aider acts on text), said as such
            row[name] = fact[name]
        elif name in fact:  # a fact holds only where every run that measured it found it
            row[name] = row.get(name, True) is True and bool(fact[name])
    if fact.get("launcher"):
        row["launcher"] = row.get("launcher", True) and bool(fact.get("root_from_key"))
python_agents = {}
for case in ET.parse(sys.argv[2]).getroot().iter("testcase"):
    where = case.get("classname", "")
    if where.endswith(("test_pypi_clients", "test_sdk_agents")):
        failed = any(child.tag in ("failure", "error") for child in case)
        skipped = any(child.tag == "skipped" for child in case)
        python_agents[case.get("name")] = "skipped" if skipped else "failed" if failed else "passed"
mark = lambda v: v if isinstance(v, str) else "-" if v is None else "yes" if v else "NO"
header = ("client", "version", "governed", "counted", "root learned (text)", "root (key)", "launcher")
table = [header] + [(c, r["version"], mark(r.get("governed")), mark(r.get("counted")), mark(r.get("root_from_text")),
                     mark(r.get("root_from_key")), mark(r.get("launcher"))) for c, r in sorted(rows.items())]
widths = [max(len(row[i]) for row in table) for i in range(len(header))]
for row in table:
    print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
if python_agents:
    print("\npython agents (tests/e2e/test_pypi_clients.py, test_sdk_agents.py: governed and counted):")
    for name, outcome in sorted(python_agents.items()):
        print(f"  {outcome:<8} {name}")
broken = [c for c, r in rows.items() if False in (r.get("governed"), r.get("counted"), r.get("root_from_text"),
                                                   r.get("root_from_key"))]
broken += [n for n, o in python_agents.items() if o == "failed"]
if broken:
    print(f"\nnot ready to update: {', '.join(broken)}")
sys.exit(1 if broken else 0)
EOF
