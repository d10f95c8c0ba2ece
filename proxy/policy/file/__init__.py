"""The policy file: loading (YAML with lines, validation, the examples' self-test), serving and live reload,
the reload guard (a widening edit is held) and watching the directory.

`loader`, `manager` (`PolicyManager`: serving, reload, `pick`), `shared` (the parent's decision that
`serve --workers N`'s workers serve: `FollowerPolicies`), `reload_guard` + `widening` (what a reload may
change silently), `watch` (inotify read by the event loop, watchfiles elsewhere). The schema itself is
`proxy/policy/schema.py`, below every room, since every check reads it.
"""

from __future__ import annotations

from .loader import LoadedPolicy, default_policy_path, load_policy_file, load_policy_text
from .manager import PolicyManager
from .reload_guard import reload_verdict

__all__ = ["LoadedPolicy", "PolicyManager", "default_policy_path", "load_policy_file", "load_policy_text",
           "reload_verdict"]
