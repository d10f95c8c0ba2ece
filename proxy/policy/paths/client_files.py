"""The files agent clients load on their own: every tool profile's `files`, protected from writing for all.

Each built-in profile (proxy/default_policies/tool-profiles.yaml) names what its client's release loads into the
model's context or runs by itself - instructions (`AGENTS.md`, `CONTEXT.md`, `AGENTS.override.md`), rules,
settings, hooks, skills -, read from the released packages (tests/policy/test_client_files.py); a policy's own
profiles add theirs. All of them are protected whatever client a request comes from: a model must not rewrite
what the next session is told, under this client or another (`protected.client_files`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from ..schema import Policy

__all__ = ["BUILTIN_PROFILES_FILE", "builtin_client_files", "client_files"]

BUILTIN_PROFILES_FILE = Path(__file__).resolve().parents[2] / "default_policies" / "tool-profiles.yaml"


@functools.cache
def builtin_client_files() -> tuple[str, ...]:
    """The `files` of every built-in profile, in order, once each."""
    data = yaml.safe_load(BUILTIN_PROFILES_FILE.read_text(encoding="utf-8"))
    found = [name for profile in data.values() if isinstance(profile, dict) for name in profile.get("files") or ()]
    return tuple(dict.fromkeys(found))


def client_files(policy: Policy) -> list[str]:
    """The built-in profiles' files and those of the policy's own profiles."""
    own = [name for profile in policy.profiles.values() if profile is not None for name in profile.files]
    return list(dict.fromkeys([*builtin_client_files(), *own]))
