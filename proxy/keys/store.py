"""Project keys in the store (`project_keys`, migration 0018): made, listed, revoked, found by hash, marked used.

Only a key's SHA-256 is kept (proxy/keys/tokens.py); `create` hands the key back once, to be shown once.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.keys.tokens import PREFIX, is_key, key_hash, new_key
from proxy.store.tables import project_keys

__all__ = ["ProjectKey", "create_key", "find_key", "list_keys", "mark_used", "revoke_keys"]


@dataclass(frozen=True, slots=True)
class ProjectKey:
    """A key as the store holds it (never the key itself): what it binds a client to, and its history."""

    id: str
    prefix: str
    label: str | None
    root: str
    client: str | None
    policy: str | None
    created_at: float
    last_used_at: float | None = None
    revoked_at: float | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


_COLUMNS = (project_keys.c.id, project_keys.c.prefix, project_keys.c.label, project_keys.c.root,
            project_keys.c.client, project_keys.c.policy, project_keys.c.created_at, project_keys.c.last_used_at,
            project_keys.c.revoked_at)


def _key(row: Mapping[str, object] | tuple[object, ...]) -> ProjectKey:
    return ProjectKey(*row)


async def create_key(conn: AsyncConnection, *, root: str, client: str | None = None, policy: str | None = None,
                     label: str | None = None) -> tuple[str, ProjectKey]:
    """A new key bound to `root` (already checked), stored by its hash: (the key, shown once; its row)."""
    key = new_key()
    made = ProjectKey(id="k" + secrets.token_hex(6), prefix=key[:len(PREFIX) + 4], label=label, root=root,
                      client=client, policy=policy, created_at=time.time())
    await conn.execute(project_keys.insert().values(
        id=made.id, key_hash=key_hash(key), prefix=made.prefix, label=label, root=root, client=client,
        policy=policy, created_at=made.created_at))
    return key, made


async def find_key(conn: AsyncConnection, hashed: str) -> ProjectKey | None:
    """The key with this hash, revoked or not; None for none."""
    row = (await conn.execute(select(*_COLUMNS).where(project_keys.c.key_hash == hashed))).first()
    return _key(tuple(row)) if row is not None else None


async def list_keys(conn: AsyncConnection, *, revoked: bool = True) -> list[ProjectKey]:
    """Every key, oldest first; `revoked` False leaves the revoked ones out."""
    query = select(*_COLUMNS).order_by(project_keys.c.created_at, project_keys.c.id)
    if not revoked:
        query = query.where(project_keys.c.revoked_at.is_(None))
    return [_key(tuple(row)) for row in await conn.execute(query)]


async def revoke_keys(conn: AsyncConnection, key_or_label: str) -> list[ProjectKey]:
    """Revokes the key given whole, or by its id, or every unrevoked key with that label; returns what it revoked."""
    c = project_keys.c
    if key_or_label.startswith(PREFIX):
        if not is_key(key_or_label):
            return []
        match = c.key_hash == key_hash(key_or_label)
    else:
        match = or_(c.id == key_or_label, c.label == key_or_label)
    found = [_key(tuple(row)) for row in await conn.execute(select(*_COLUMNS).where(match,
                                                                                      c.revoked_at.is_(None)))]
    if found:
        now = time.time()
        await conn.execute(update(project_keys).where(c.id.in_([k.id for k in found]), c.revoked_at.is_(None))
                           .values(revoked_at=now))
    return found


async def mark_used(conn: AsyncConnection, used: Mapping[str, float]) -> None:
    """Sets each key's `last_used_at` to the time given, unless a later one is stored (replicas write theirs)."""
    c = project_keys.c
    for key_id, at in used.items():
        await conn.execute(update(project_keys).where(c.id == key_id, or_(c.last_used_at.is_(None),
                                                                           c.last_used_at < at))
                           .values(last_used_at=at))
