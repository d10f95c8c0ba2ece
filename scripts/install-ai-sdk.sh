#!/usr/bin/env bash
# Installs the Vercel AI SDK (OpenCode's client library) outside the repository, pinned, with the machine's
# npm: the hostile-upstream suite's client check and tests/e2e/test_ai_sdk_agent.py's agent use it.
#   ALLOWLIST_PROXY_AI_SDK_PREFIX  where it goes (default: ~/.cache/allowlist-proxy-ai-sdk); kept between runs
# Exits 0 with a message when npm is missing or an install fails, so those tests skip with a reason instead
# (set E2E_REQUIRE_CLIENTS=1 for the end-to-end one to fail then). zod is the SDK's peer dependency for tool
# input schemas, pinned too (tests/e2e/clients.py AI_SDK names the same versions).
set -uo pipefail
AGENT_CLIS_CACHE="${ALLOWLIST_PROXY_AI_SDK_PREFIX:-$HOME/.cache/allowlist-proxy-ai-sdk}" \
  exec bash "$(dirname "$0")/install-agent-clis.sh" ai@6.0.333 @ai-sdk/openai-compatible@2.0.92 zod@4.6.7
