"""The admin token: `require_admin`, the one dependency every admin route carries (`/policies`, `/metrics`,
`/stats/*`); tests/test_admin_routes.py fails for a route that is neither public nor guarded by it."""

from __future__ import annotations

import secrets

from fastapi import Depends, Request

from proxy.errors import Unauthorized

__all__ = ["ADMIN", "require_admin"]


def require_admin(request: Request) -> None:
    """Passes when no admin token is configured, or the request carries `Authorization: Bearer <token>`."""
    token = request.app.state.proxy.settings.http.admin_token
    if not token:
        return
    given = request.headers.get("authorization", "")
    # Constant-time: the token guards the endpoints that show other users' commands.
    if not secrets.compare_digest(given.encode(), f"Bearer {token}".encode()):
        raise Unauthorized("this endpoint needs the admin token: Authorization: Bearer <admin_token>")


# For `dependencies=[ADMIN]` on a route or a router.
ADMIN = Depends(require_admin)
