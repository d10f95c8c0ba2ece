"""Project keys: a client told its project root, tool profile and policy through a channel no model can write.

    tokens  a key as text: made (`alp_` + random + checksum), recognised, hashed, masked, read from headers
    store   the `project_keys` rows: create, list, revoke, find by hash, mark used
    ring    a running proxy's keys: `KeyRing.bind` (a request's key, cached `key_cache_seconds`), last-used writes
    launch  `allowlist-proxy run CLIENT`: each client's base URL and key, set for its process only
"""

from __future__ import annotations

from .ring import KeyRing
from .store import ProjectKey
from .tokens import KEY_PATTERN, PREFIX, is_key, key_hash, masked, new_key

__all__ = ["KEY_PATTERN", "PREFIX", "KeyRing", "ProjectKey", "is_key", "key_hash", "masked", "new_key"]
