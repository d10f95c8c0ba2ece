"""Host names judged by what they resolve to (`urls.resolve`, issue 24): a name whose answer is a loopback,
private, link-local or denied address is refused like the address; a public answer, an allowed network or
a name that does not exist passes; a lookup that does not answer in time is refused, and fills the cache
for the retry. No network here: the resolver is a table (`proxy.policy.urls.resolve.resolver`, the hook)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from proxy.policy import Policy, judge_call, judge_command, load_policy_file
from proxy.policy.urls import resolve as resolving
from proxy.policy.urls.rules import url_problem

from .conftest import ROOT

ANSWERS = {
    "wiki.corp.acme.io": ("10.0.0.5",),
    "rebind.attacker.io": ("93.184.216.34", "127.0.0.1"),
    "meta.attacker.io": ("169.254.169.254",),
    "mapped.attacker.io": ("::ffff:169.254.169.254",),
    "v6.attacker.io": ("::1",),
    "cgnat.attacker.io": ("100.64.0.1",),
    "public.acme.io": ("93.184.216.34", "2606:2800:220:1::1"),
    "docs.corp.acme.io": ("10.1.2.3",),
    "blocked.acme.io": ("203.0.113.9",),
    "missing.acme.io": (),
}


class Table:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.release = threading.Event()

    def __call__(self, host: str) -> tuple[str, ...]:
        self.asked.append(host)
        if host.startswith("slow"):
            self.release.wait(10)
            return ("10.9.9.9",)
        return ANSWERS[host]


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> Iterator[Table]:
    found = Table()
    monkeypatch.setattr(resolving, "resolver", found)
    resolving.clear()
    yield found
    found.release.set()
    resolving.clear()


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy_file(ROOT / "policies" / "strict.yaml").policy


def _with(policy: Policy, **urls: object) -> Policy:
    return policy.model_copy(update={"urls": policy.urls.model_copy(update=urls)})


@pytest.mark.parametrize("host", ["wiki.corp.acme.io", "rebind.attacker.io", "meta.attacker.io",
                                  "mapped.attacker.io", "v6.attacker.io", "cgnat.attacker.io", "WIKI.Corp.acme.io."])
def test_a_name_that_resolves_to_a_refused_address_is_refused(table: Table, policy: Policy, host: str) -> None:
    assert policy.urls.resolve  # the shipped policies resolve
    assert url_problem(f"https://{host}/latest/meta-data", policy.urls) == "url"
    assert judge_call(policy, "webfetch", {"url": f"http://{host}/"}).reasons == ("url",)
    # A script's URL argument and a value of a tool no profile knows are read the same way.
    assert judge_command(policy, f"uv run scripts/fetch_page.py https://{host}/x").reasons[0] == "argument"
    assert "url" in judge_call(policy, "mystery", {"target": f"https://{host}/x"}).reasons


def test_public_answers_allowed_networks_and_missing_names_pass(table: Table, policy: Policy) -> None:
    assert url_problem("https://public.acme.io/docs", policy.urls) is None
    assert url_problem("https://missing.acme.io/", policy.urls) is None  # nothing to fetch from
    assert url_problem("https://docs.corp.acme.io/", policy.urls) == "url"
    assert url_problem("https://docs.corp.acme.io/", _with(policy, allow_hosts=["10.1.0.0/16"]).urls) is None
    assert url_problem("https://docs.corp.acme.io/", _with(policy, allow_hosts=["docs.corp.acme.io"]).urls) is None
    assert url_problem("https://blocked.acme.io/", _with(policy, deny_hosts=["203.0.113.0/24"]).urls) == "url"
    # The documentation names are never looked up (the policies' own examples judge alike anywhere).
    assert url_problem("https://example.com/x", policy.urls) is None and "example.com" not in table.asked


def test_off_the_name_is_judged_by_its_spelling(table: Table, policy: Policy) -> None:
    assert url_problem("https://wiki.corp.acme.io/", _with(policy, resolve=False).urls) is None
    assert table.asked == []


def test_answers_are_kept(table: Table, policy: Policy) -> None:
    for _ in range(5):
        assert url_problem("https://public.acme.io/x", policy.urls) is None
        assert url_problem("https://meta.attacker.io/x", policy.urls) == "url"
    assert sorted(table.asked) == ["meta.attacker.io", "public.acme.io"]


def test_a_slow_lookup_is_refused_and_its_answer_kept_for_the_retry(table: Table, policy: Policy) -> None:
    quick = _with(policy, resolve_timeout_ms=1).urls
    assert url_problem("https://slow.attacker.io/", quick) == "url"
    table.release.set()
    assert resolving.lookup("slow.attacker.io", 10) == ("10.9.9.9",)
    assert url_problem("https://slow.attacker.io/", quick) == "url"  # now refused by its answer, from the cache
    assert table.asked.count("slow.attacker.io") == 1


def test_when_every_lookup_waits_a_new_name_is_refused_at_once(table: Table, policy: Policy) -> None:
    quick = _with(policy, resolve_timeout_ms=1).urls
    for index in range(resolving._WORKERS):
        assert url_problem(f"https://slow{index}.attacker.io/", quick) == "url"
    assert url_problem("https://public.acme.io/", quick) == "url"  # not looked up: no thread is free
    assert "public.acme.io" not in table.asked
    table.release.set()


def test_through_the_proxy_a_name_resolving_to_the_metadata_address_is_refused_and_recorded(
        table: Table, upstream, proxy) -> None:
    from proxy.testing.scripted_upstream import Reply
    from tests.conftest import chat
    tools = [{"type": "function", "function": {"name": "webfetch", "parameters": {
        "type": "object", "properties": {"url": {"type": "string"}, "format": {"type": "string"}}}}}]
    upstream.script(Reply(tool_calls=[("webfetch", {"url": "http://meta.attacker.io/latest/meta-data/"})]),
                    Reply(tool_calls=[("webfetch", {"url": "https://public.acme.io/docs"})]))
    with proxy.client() as http:
        response = http.post("/v1/chat/completions", json=chat([{"role": "user", "content": "x"}], tools=tools),
                             headers={"x-session-id": "ses_resolve", "user-agent": "opencode/1.18.33"})
    assert response.status_code == 200, response.text
    calls = response.json()["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == ['{"url": "https://public.acme.io/docs"}']
    assert "url" in upstream.requests[-1]["messages"][-1]["content"]
    rows = proxy.rows("SELECT decision, primary_reason FROM tool_calls WHERE decision = 'reject'")
    assert [tuple(r) for r in rows] == [("reject", "url")]
