#!/usr/bin/env bash
# Installs the Python agents and agent SDKs that tests/e2e/test_pypi_clients.py, test_sdk_agents.py and
# test_launcher.py drive, each
# pinned, each in a venv of its own outside the repository (the project's environment stays as pyproject.toml says).
#   AGENT_PYS_CACHE  where the venvs go (default: ~/.cache/allowlist-proxy-e2e-py); kept between runs
#   AGENT_PYS_NEWEST=1  each package's newest release instead of its pin (scripts/canary-clients.sh)
# Exits 0 with a message when an install fails, so those tests skip with a reason instead (set
# E2E_REQUIRE_CLIENTS=1 for pytest to fail then).
set -uo pipefail

cache="${AGENT_PYS_CACHE:-$HOME/.cache/allowlist-proxy-e2e-py}"
# client name -> the pinned requirements its venv holds (space-separated; `-slim` variants where they exist)
declare -A packages=(
  [smolagents]="smolagents[openai]==1.26.0"
  [mini-swe-agent]="mini-swe-agent==2.4.6"
  [openai-agents]="openai-agents==0.24.0"
  [pydantic-ai]="pydantic-ai-slim[openai]==2.78.0"
  # langchain-core 1.8.4 needs langchain-protocol>=0.0.22, which the index does not have yet: 1.8.3 is the newest
  # that installs, and langgraph 1.2.24 and langchain-openai 1.8.1 accept it.
  [langgraph]="langgraph==1.2.24 langgraph-prebuilt==1.1.3 langchain-core==1.8.3 langchain-openai==1.8.1 langchain-community==0.4.2 langchain-experimental==0.4.2"
  [strands]="strands-agents[openai]==1.62.0 strands-agents-tools==0.8.10"
  [agno]="agno[openai]==3.1.10"
  [autogen]="autogen-agentchat==0.7.5 autogen-ext[openai]==0.7.5"
  [dspy]="dspy==3.4.1"
  [open-interpreter]="open-interpreter==0.4.3"
  # `allowlist-proxy run aider` (tests/e2e/test_launcher.py); aider acts on text, governed as text (tests/e2e/test_text_agents.py)
  [aider]="aider-chat==0.86.2"
)

mkdir -p "$cache"
for client in "${!packages[@]}"; do
  spec="${packages[$client]}"
  if [ "${AGENT_PYS_NEWEST:-}" = "1" ]; then spec="$(sed -E 's/==[^ ]+//g' <<< "$spec")"; fi
  venv="$cache/$client"
  if [ -f "$venv/.installed" ] && [ "$(cat "$venv/.installed")" = "$spec" ]; then
    echo "$spec in $venv"
    continue
  fi
  rm -rf "$venv"
  read -ra requirements <<< "$spec"
  if python3 -m venv "$venv" && "$venv/bin/pip" install -q "${requirements[@]}" >&2; then
    echo "$spec" > "$venv/.installed"
    echo "$spec in $venv"
  else
    echo "pip install $spec failed: its end-to-end test will be skipped" >&2
  fi
done
exit 0
