#!/usr/bin/env bash
# Installs the agent CLIs that tests/e2e/test_clients.py drives - Qwen Code, Codex, Claude Code, Cline,
# Continue and Kilo - outside the repository, pinned, with the machine's npm.
#   AGENT_CLIS_CACHE  where they go (default: ~/.cache/allowlist-proxy-e2e-clients); kept between runs
# Packages given as arguments (name@version) are installed instead of the CLIs (scripts/install-ai-sdk.sh).
# Exits 0 with a message when npm is missing or an install fails, so those tests skip with a reason
# instead (set E2E_REQUIRE_CLIENTS=1 for pytest to fail then).
set -uo pipefail

cache="${AGENT_CLIS_CACHE:-$HOME/.cache/allowlist-proxy-e2e-clients}"
# The releases the suite runs against: the newest each registry had when they were last moved (issue 37;
# scripts/canary-clients.sh tries newer ones first).
packages=(
  "@qwen-code/qwen-code@0.24.4"
  "@openai/codex@0.171.0"
  "@anthropic-ai/claude-code@2.1.332"
  "cline@3.0.65"
  "@continuedev/cli@1.5.47"
  # The newest @kilocode/cli whose linux binary (@kilocode/cli-linux-x64, an optional dependency) is published
  # at the same version: 7.8.1 names a 7.8.1 binary that does not exist (the binary's 7.7.9 has no CLI release).
  "@kilocode/cli@7.7.7"
)
if [ $# -gt 0 ]; then packages=("$@"); fi

installed() {  # package@version -> whether node_modules holds exactly that version
  local spec="$1" name="${1%@*}" version="${1##*@}"
  [ -f "$cache/node_modules/$name/package.json" ] &&
    [ "$(node -p "require('$cache/node_modules/$name/package.json').version" 2>/dev/null)" = "$version" ]
}

missing=()
for spec in "${packages[@]}"; do installed "$spec" || missing+=("$spec"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "${packages[*]} already in $cache"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: the agent CLI end-to-end tests will be skipped" >&2
  exit 0
fi
mkdir -p "$cache"
# One at a time, so one package that fails to install does not take the others with it.
for spec in "${missing[@]}"; do
  if ! npm install --prefix "$cache" --no-audit --no-fund --loglevel=error "$spec" >&2; then
    echo "npm install $spec failed: its end-to-end test will be skipped" >&2
  fi
done
for spec in "${packages[@]}"; do
  if installed "$spec"; then echo "$spec in $cache"; else echo "$spec is not installed" >&2; fi
done
exit 0
