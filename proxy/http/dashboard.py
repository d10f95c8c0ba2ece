"""GET /dashboard (and `/`, which redirects there): one page and its bundled files; the page itself reads
`/stats/models` and `/stats/overview`, and lays out its per-model table by `/dashboard/columns.json`
(`proxy.stats.models.MODEL_COLUMNS`).

The page holds no data, so it is served without the admin token; the data it fetches is guarded as
usual, and the page sends the token it was opened with (`/dashboard?token=...`). A strict Content
Security Policy keeps the page on its own origin: scripts, styles and requests to anywhere else are
refused by the browser, not merely absent from the code.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

from proxy.errors import ProxyError, error_response
from proxy.stats.models import MODEL_COLUMNS

__all__ = ["STATIC_DIR", "router"]

STATIC_DIR = Path(__file__).resolve().with_name("static")
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
}
# Only what ships in the package is served, by exact name: no paths, so nothing outside the folder.
_FILES = {p.name: p for p in sorted(STATIC_DIR.iterdir()) if p.is_file() and p.suffix in _TYPES}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_HEADERS = {
    "content-security-policy": _CSP,
    "referrer-policy": "no-referrer",  # the first URL may carry ?token=
    "x-content-type-options": "nosniff",
}

router = APIRouter()


class _NotFound(ProxyError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "not_found"


@router.get("/", include_in_schema=False)
async def root(request: Request) -> Response:
    """The proxy's address opened in a browser: to the dashboard, the query (`?token=`) kept. Relative, so that
    behind a reverse proxy that serves it under a path prefix it stays under that prefix."""
    query = request.url.query
    return RedirectResponse("dashboard" + (f"?{query}" if query else ""), status_code=307,
                            headers={"referrer-policy": "no-referrer", "cache-control": "no-store"})


@router.get("/dashboard", include_in_schema=False)
async def dashboard() -> Response:
    return FileResponse(_FILES["dashboard.html"], media_type=_TYPES[".html"],
                        headers={**_HEADERS, "cache-control": "no-store"})


@router.get("/dashboard/sessions/{session_id}", include_in_schema=False)
async def session_page(session_id: str) -> Response:
    """One session's page: like the dashboard it holds no data; it reads the admin-guarded
    `/stats/sessions/{id}` with the token the dashboard was opened with."""
    return FileResponse(_FILES["session.html"], media_type=_TYPES[".html"],
                        headers={**_HEADERS, "cache-control": "no-store"})


@router.get("/dashboard/columns.json", include_in_schema=False)
async def columns() -> Response:
    """The per-model table's columns: {"models": [{"header", "path", "format"}, ...]}, left to right. No data,
    so no token, like the page."""
    return JSONResponse({"models": [asdict(c) for c in MODEL_COLUMNS]},
                        headers={**_HEADERS, "cache-control": "max-age=3600"})


@router.get("/dashboard/static/{name}", include_in_schema=False)
async def static_file(name: str) -> Response:
    path = _FILES.get(name)
    if path is None:
        return _not_found(name)
    # Files change only with the package; an hour saves the refetch without pinning an old version for long.
    return FileResponse(path, media_type=_TYPES[path.suffix], headers={**_HEADERS, "cache-control": "max-age=3600"})


def _not_found(name: str) -> JSONResponse:
    return error_response(_NotFound(f"no dashboard file {name!r}", param="name"))
