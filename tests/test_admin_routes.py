"""Every route of the app is either public or carries `require_admin`: a new admin route without it fails here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from proxy.config import Settings
from proxy.http.app import create_app
from proxy.http.auth import require_admin

# The routes anyone may call: the model API the agents use, the load balancer's probe, and the dashboard page
# (it holds no data; what it fetches is guarded).
PUBLIC = {
    "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/models", "/v1/{path:path}",
    "/health", "/dashboard", "/dashboard/static/{name}", "/dashboard/columns.json",  # the page and its layout: no data
    "/dashboard/sessions/{session_id}",  # the session page: its data comes from the guarded /stats/sessions/{id}
    "/",  # a redirect to /dashboard
}


def _calls(dependant: Dependant) -> set[object]:
    found = set()
    for dependency in dependant.dependencies:
        found.add(dependency.call)
        found |= _calls(dependency)
    return found


def _api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (included := getattr(route, "original_router", None)) is not None:  # FastAPI >= 0.165 includes lazily
            yield from _api_routes(included.routes)


def test_every_route_is_public_or_needs_the_admin_token() -> None:
    routes = list(_api_routes(create_app(Settings(upstream="http://127.0.0.1:9/v1")).routes))
    guarded = {r.path for r in routes if require_admin in _calls(r.dependant)}
    assert {r.path for r in routes} - PUBLIC == guarded, "an admin route without require_admin, or a public one with it"
    assert {"/policies", "/metrics", "/stats/models", "/stats/overview", "/stats/loops"} <= guarded


def test_the_root_redirects_to_the_dashboard_with_its_token(upstream, start_proxy) -> None:
    proxy = start_proxy(upstream.url, admin_token="s3cret")
    with proxy.client() as client:
        answer = client.get("/", follow_redirects=False)
        assert answer.status_code == 307 and answer.headers["location"] == "dashboard"
        assert client.get("/?token=s3cret", follow_redirects=False).headers["location"] == "dashboard?token=s3cret"
        page = client.get("/", follow_redirects=True)
        assert page.status_code == 200 and str(page.url).endswith("/dashboard") and "<html" in page.text.lower()
