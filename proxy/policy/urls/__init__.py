"""URLs: the schemes and hosts `urls:` allows, with the lookups that tell a name's addresses (`urls.resolve`).

`rules` (a URL's scheme and host against the policy, special addresses refused), `resolve` (bounded, cached DNS
lookups off the event loop).
"""

from __future__ import annotations

from .rules import host_allowed, is_url, url_problem

__all__ = ["host_allowed", "is_url", "url_problem"]
