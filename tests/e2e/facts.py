"""What an end-to-end run found about a client, for scripts/canary-clients.sh's table: written as JSON lines to
the file `$E2E_FACTS` names (nothing without it). Each fact is computed from what really happened, before the
test asserts it, so a failing test still says which of them held."""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["any_version", "record"]


def any_version() -> bool:
    """`E2E_ANY_VERSION=1` (the canary): the installed release is tried whatever the suite pins."""
    return os.environ.get("E2E_ANY_VERSION") == "1"


def record(client: str, version: str, **facts: Any) -> None:
    path = os.environ.get("E2E_FACTS")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"client": client, "version": version, **facts}) + "\n")
