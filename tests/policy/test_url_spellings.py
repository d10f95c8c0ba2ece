"""Cloud metadata addresses and wildcard-DNS spellings of special addresses, refused before any lookup
(issue 38), while names that merely hold numbers stay allowed."""

from __future__ import annotations

import pytest

from proxy.policy.schema import UrlRules
from proxy.policy.urls import resolve
from proxy.policy.urls.rules import url_problem

RULES = UrlRules()
RESOLVING = UrlRules(resolve=True)


@pytest.mark.parametrize("host", [
    # Metadata and host-agent addresses, some of them "global" to the ipaddress module.
    "168.63.129.16", "192.0.0.192", "100.100.100.200", "[fd00:ec2::254]", "169.254.170.2", "[fd00:ec2::23]",
    "[::ffff:168.63.129.16]", "2822734096", "0xa83f8110", "0250.077.0201.020",
    # ... and spelled for a wildcard DNS service, in every form one reads.
    "a9fea9fe.nip.io", "0xa9fea9fe.nip.io", "2852039166.nip.io", "169-254-169-254.sslip.io",
    "0251.0376.0251.0376.nip.io", "0251-0376-0251-0376.nip.io", "x.025177524776.nip.io", "168-63-129-16.sslip.io",
    "a83f8110.nip.io", "app.168.63.129.16.xip.io", "7f000001.nip.io", "0x7f000001.nip.io", "2130706433.nip.io",
    "127-1.nip.io", "10-0-0-1.sslip.io", "fd00-ec2--254.sslip.io", "--1.sslip.io", "0a000001.traefik.me",
    "c0a80001.lvh.me", "c00000c0.nip.io",
    # Metadata names.
    "metadata.goog", "metadata.google.internal", "metadata.tencentyun.com", "metadata.platformequinix.com",
])  # fmt: skip
def test_refused_before_any_lookup(host: str) -> None:
    asked: list[str] = []
    resolver, resolve.resolver = resolve.resolver, lambda name: asked.append(name) or ("93.184.216.34",)  # type: ignore[func-returns-value]
    try:
        assert url_problem(f"http://{host}/latest/meta-data/", RULES) == "url", host
        assert url_problem(f"http://{host}/latest/meta-data/", RESOLVING) == "url", host
    finally:
        resolve.resolver = resolver
    assert asked == [], host


@pytest.mark.parametrize("host", ["8-8-8-8.sslip.io", "deadbeef.example.com", "docs.rs", "0.client-channel.google.com",
                                  "v1-2.api.example.com", "20240101.example.com", "cafe-babe.example.com",
                                  "1-1-1-1.nip.io", "api-v2.example.com", "2024-06-01.example.com"])
def test_names_that_hold_numbers_stay_allowed(host: str) -> None:
    assert url_problem(f"https://{host}/x", RULES) is None, host
