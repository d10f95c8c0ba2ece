#!/usr/bin/env bash
# Installs the pinned agent SDKs and CLIs whose tool lists tests/policy/client_tools/ holds, outside the
# repository, so the catalogues can be captured again (the tests read the committed JSON, not these):
#   scripts/install-catalogue-sdks.sh && ~/.cache/allowlist-proxy-catalogues/venv/bin/python \
#     scripts/capture_sdk_tools.py tests/policy/client_tools
set -euo pipefail
CACHE="${CATALOGUE_CACHE:-$HOME/.cache/allowlist-proxy-catalogues}"
mkdir -p "$CACHE/npm" "$CACHE/kilo"
if [ ! -x "$CACHE/venv/bin/python" ]; then python3 -m venv "$CACHE/venv"; fi
"$CACHE/venv/bin/pip" install -q smolagents==1.20.0 pydantic-ai-slim==2.68.0 markdownify openai-agents==0.24.0 \
  langchain-community==0.4.2 langchain-core==1.8.3 langchain-experimental mini-swe-agent==2.4.6
# Continue: its tool schemas are read from the published sources (scripts/capture-continue-tools.mjs).
(cd "$CACHE/npm" && npm pack -q @continuedev/cli@1.5.47 >/dev/null && mkdir -p continue \
  && tar xzf continuedev-cli-1.5.47.tgz -C continue)
# Kilo: run against a capture server (scripts/capture_client_tools.py kilo OUT --binary ...).
(cd "$CACHE/kilo" && npm install -q --no-audit --no-fund --ignore-scripts @kilocode/cli-linux-x64@7.7.9 >/dev/null)
echo "installed under $CACHE"
