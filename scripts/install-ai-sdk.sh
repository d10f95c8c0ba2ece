#!/usr/bin/env bash
# Installs the Vercel AI SDK (OpenCode's client library) outside the repository, pinned, with the machine's
# npm: the hostile-upstream suite's client check and tests/e2e/test_ai_sdk_agent.py's agent use it.
#   ALLOWLIST_PROXY_AI_SDK_PREFIX  where it goes (default: ~/.cache/allowlist-proxy-ai-sdk); kept between runs
# Exits 0 with a message when npm is missing or the install fails, so those tests skip with a reason instead
# (set E2E_REQUIRE_CLIENTS=1 for the end-to-end one to fail then).
set -uo pipefail

prefix="${ALLOWLIST_PROXY_AI_SDK_PREFIX:-$HOME/.cache/allowlist-proxy-ai-sdk}"
# zod is the SDK's peer dependency for tool input schemas, pinned too.
packages=("ai@6.0.333" "@ai-sdk/openai-compatible@2.0.92" "zod@4.6.7")

installed() {  # package@version -> whether node_modules holds exactly that version
  local name="${1%@*}" version="${1##*@}"
  [ -f "$prefix/node_modules/$name/package.json" ] &&
    [ "$(node -p "require('$prefix/node_modules/$name/package.json').version" 2>/dev/null)" = "$version" ]
}

missing=()
for spec in "${packages[@]}"; do installed "$spec" || missing+=("$spec"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "AI SDK already in $prefix"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: the AI SDK tests will be skipped" >&2
  exit 0
fi
if ! npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "${packages[@]}" >&2; then
  echo "AI SDK install failed: its tests will skip" >&2
fi
exit 0
