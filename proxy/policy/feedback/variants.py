"""Feedback experiments: which of a policy's `feedback_variants` a session reads.

Each session is assigned one variant, uniformly at random: the variant is drawn from a hash of the policy's
name and the session id, so the draw needs no shared state, is the same on every replica and after a
restart, and is recorded with every call of the session (`tool_calls.feedback_variant`) for the stats.
"""

from __future__ import annotations

import hashlib

from ..schema import Policy

__all__ = ["variant_for"]


def variant_for(policy: Policy, session_id: str | None) -> str | None:
    """The session's variant name, or None when the policy runs no experiment."""
    names = list(policy.feedback_variants)
    if not names or session_id is None:
        return None
    digest = hashlib.sha256(f"{policy.name}\x00{session_id}".encode("utf-8", "surrogatepass")).digest()
    return names[int.from_bytes(digest[:8], "big") % len(names)]
