"""How each agent client is pointed at the proxy with a project key, for its own process only
(`allowlist-proxy run CLIENT`): environment variables, command-line options, or a configuration file of the
launcher's own in a private temporary directory; never the user's configuration.

Each client's way, as its own documentation and the end-to-end tests (tests/e2e/) found it:
- OpenCode and Kilo read a whole configuration from `OPENCODE_CONFIG_CONTENT` / `KILO_CONFIG_CONTENT`, merged over
  the user's: an `@ai-sdk/openai-compatible` provider whose `baseURL` is the proxy's `/v1` and `apiKey` the key.
- Claude Code: `ANTHROPIC_BASE_URL` (no `/v1`) and `ANTHROPIC_AUTH_TOKEN` (sent as `Authorization: Bearer`, which
  it takes without the interactive "use this API key?" question that `ANTHROPIC_API_KEY` asks); a user's
  `ANTHROPIC_API_KEY` is left out of the child's environment so only the key goes.
- Codex: `-c` overrides of a model provider (`base_url`, `env_key = "ALLOWLIST_PROXY_KEY"`, `wire_api =
  "responses"`), the key in that variable.
- Qwen Code: `OPENAI_BASE_URL`, `OPENAI_API_KEY`, `OPENAI_MODEL` and `--auth-type openai`.
- Continue (`cn`): `--config` naming a config.yaml written for the run (an `openai` model with `apiBase`).
- aider: `OPENAI_API_BASE`, `OPENAI_API_KEY`, and `AIDER_MODEL=openai/MODEL`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import yaml

from proxy.keys.tokens import masked

__all__ = ["CLIENTS", "Launch", "LaunchClient", "plan"]

PROVIDER = "allowlist-proxy"
KEY_VARIABLE = "ALLOWLIST_PROXY_KEY"


@dataclass(frozen=True, slots=True)
class LaunchClient:
    name: str
    binary: str
    install: str  # how to get it, for the message when it is not found
    needs_files: bool = False  # a configuration file for the run: the launcher waits, then removes it


CLIENTS = {c.name: c for c in (
    LaunchClient("opencode", "opencode", "npm install -g opencode-ai"),
    LaunchClient("claude-code", "claude", "npm install -g @anthropic-ai/claude-code"),
    LaunchClient("codex", "codex", "npm install -g @openai/codex"),
    LaunchClient("qwen-code", "qwen", "npm install -g @qwen-code/qwen-code"),
    LaunchClient("continue", "cn", "npm install -g @continuedev/cli", needs_files=True),
    LaunchClient("kilo", "kilo", "npm install -g @kilocode/cli"),
    LaunchClient("aider", "aider", "pipx install aider-chat"),
)}


@dataclass(kw_only=True)
class Launch:
    """What starting one client sets: options before the user's, variables set and left out, files written (by
    name, in the run's private directory: `{dir}` in the options and variables stands for it)."""

    client: LaunchClient
    key: str
    options: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    def shown(self) -> str:
        """What `run --print` prints: every variable, option and file, the key masked."""
        hide = masked(self.key)
        lines = [f"client: {self.client.name} ({self.client.binary})"]
        lines += [f"unset {name}" for name in self.unset]
        lines += [f"{name}={value.replace(self.key, hide)}" for name, value in self.env.items()]
        if self.options:
            lines.append("options: " + " ".join(_quoted(o.replace(self.key, hide)) for o in self.options))
        for name, text in self.files.items():
            lines.append(f"file {{dir}}/{name}:")
            lines += ["  " + line for line in text.replace(self.key, hide).splitlines()]
        return "\n".join(lines)


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _provider_config(base: str, key: str, models: list[str], model: str) -> str:
    """OpenCode's (and Kilo's) provider configuration, as docs/opencode.json writes it."""
    return json.dumps({
        "provider": {PROVIDER: {"npm": "@ai-sdk/openai-compatible", "name": "vLLM via allowlist-proxy",
                                "options": {"baseURL": base + "/v1", "apiKey": key},
                                "models": {m: {"name": m, "tool_call": True}
                                           for m in dict.fromkeys([model, *models])}}},
        "model": f"{PROVIDER}/{model}", "small_model": f"{PROVIDER}/{model}",
    })


def plan(client: str, *, proxy_url: str, key: str, model: str, models: list[str] | None = None) -> Launch:
    """How `client` is started against the proxy at `proxy_url` (no `/v1`) with `key` and `model`."""
    spec = CLIENTS[client]
    base, models = proxy_url.rstrip("/"), list(models or [])
    launch = Launch(client=spec, key=key)
    if client in ("opencode", "kilo"):
        variable = "OPENCODE_CONFIG_CONTENT" if client == "opencode" else "KILO_CONFIG_CONTENT"
        launch.env[variable] = _provider_config(base, key, models, model)
    elif client == "claude-code":
        launch.env.update(ANTHROPIC_BASE_URL=base, ANTHROPIC_AUTH_TOKEN=key, ANTHROPIC_MODEL=model,
                          ANTHROPIC_SMALL_FAST_MODEL=model, ANTHROPIC_DEFAULT_HAIKU_MODEL=model)
        launch.unset.append("ANTHROPIC_API_KEY")
    elif client == "codex":
        provider = "allowlist_proxy"
        launch.env[KEY_VARIABLE] = key
        for setting, value in (("model_provider", provider), ("model", model),
                               (f"model_providers.{provider}.name", PROVIDER),
                               (f"model_providers.{provider}.base_url", base + "/v1"),
                               (f"model_providers.{provider}.env_key", KEY_VARIABLE),
                               (f"model_providers.{provider}.wire_api", "responses")):
            launch.options += ["-c", f"{setting}={json.dumps(value)}"]
    elif client == "qwen-code":
        launch.env.update(OPENAI_BASE_URL=base + "/v1", OPENAI_API_KEY=key, OPENAI_MODEL=model)
        launch.options += ["--auth-type", "openai"]
    elif client == "continue":
        launch.files["config.yaml"] = yaml.safe_dump({
            "name": "allowlist-proxy", "version": "1.0.0", "schema": "v1",
            "models": [{"name": model, "provider": "openai", "model": model, "apiBase": base + "/v1", "apiKey": key,
                        "roles": ["chat", "edit", "apply"]}]}, sort_keys=False)
        launch.options += ["--config", "{dir}/config.yaml"]
    elif client == "aider":
        launch.env.update(OPENAI_API_BASE=base + "/v1", OPENAI_API_KEY=key, AIDER_MODEL=f"openai/{model}")
    return launch
