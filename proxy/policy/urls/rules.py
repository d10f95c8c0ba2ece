"""URLs a tool would open: the scheme and the host the policy's `urls:` allow.

By default only `http`/`https` to a public host pass. Loopback, private, link-local, shared, reserved,
multicast and unspecified addresses are refused in every spelling a client's resolver accepts: IPv6,
IPv4-mapped/6to4/Teredo forms, `inet_aton`'s integer, octal, hex and short forms (`2130706433`, `0177.1`,
`0x7f.1`, `0`), IDNA look-alikes (`ⓛocalhost`), and the names `localhost`, `*.localhost`, `*.local`,
`*.internal`, and names that spell such an address for a wildcard DNS service in any spelling it reads
(`127.0.0.1.nip.io`, `10-0-0-1.sslip.io`, `a9fea9fe.nip.io`, `2852039166.nip.io`, `0xa9fea9fe.nip.io`,
`0251.0376.0251.0376.nip.io`, `fd00-ec2--254.sslip.io`), all before any lookup; cloud metadata and host-agent
addresses that count as public (Azure's `168.63.129.16`, Oracle's `192.0.0.192`) and metadata host names;
and, with `urls.resolve`, names that resolve to one when judged (proxy/policy/urls/resolve.py). A URL this reading
and a browser's could read differently (backslashes, whitespace, percent-encoded or empty hosts) is
refused rather than guessed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..schema import UrlRules
from .resolve import NOT_RESOLVED, lookup

__all__ = ["host_allowed", "is_url", "url_problem"]

# `scheme://`, and the special schemes with any slashes or none: a WHATWG parser (every browser, Node's
# fetch) reads `http:/127.0.0.1`, `http:127.0.0.1` and `https:\\\\h` as `http://127.0.0.1/`.
_SCHEME = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|(?:https?|wss?|ftp):)", re.IGNORECASE)
_HAS_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_SPECIAL_NAMES = ("localhost", "localdomain", "local", "internal", "home.arpa", "arpa", "intranet", "lan")
_IPV4_LAX = re.compile(r"^[0-9a-fA-FxX.]+$")
_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
# Cloud platforms' metadata and host-agent addresses that are not link-local or private everywhere (Azure's
# WireServer, Oracle's metadata address, Alibaba's, AWS's IPv6 metadata, DNS and time services, ECS task
# metadata): each answers what a host's credentials or configuration are.
_METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "168.63.129.16", "169.254.169.254", "169.254.169.253", "169.254.169.123", "169.254.170.2", "169.254.170.23",
    "192.0.0.192", "100.100.100.200", "fd00:ec2::254", "fd00:ec2::253", "fd00:ec2::123", "fd00:ec2::23"))
_METADATA_NAMES = ("metadata.google.internal", "metadata.goog", "metadata.tencentyun.com", "metadata.packet.net",
                   "metadata.platformequinix.com", "instance-data.ec2.internal")
# The words of a host name that a wildcard DNS service reads as an address: runs of numbers (decimal, octal,
# hex) joined by dots or dashes, one number of 32 bits, or eight hex digits (`a9fea9fe.nip.io`).
_NUMBER = re.compile(r"(?:0x[0-9a-f]+|[0-9]+)")
_HEX8 = re.compile(r"[0-9a-f]{8}")
_V6_LABEL = re.compile(r"[0-9a-f-]*--?[0-9a-f-]*")
# IANA's own documentation names (RFC 2606): never resolved, so the policies' examples judge alike anywhere.
_DOCUMENTATION = ("example.com", "example.org", "example.net")


def is_url(value: str) -> bool:
    """Whether a whole value is a URL (`scheme://...`)."""
    return bool(_SCHEME.match(value))


def _address(host: str) -> _IP | None:
    if ":" not in host and not _IPV4_LAX.match(host):
        return None  # a name: no address spelling has other letters (and the parsers' errors are slow)
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _IPV4_LAX.match(host) and not host.endswith("."):
        try:  # the forms getaddrinfo/inet_aton accept: 127.1, 0x7f000001, 017700000001, 2130706433, 0
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _numbers(word: str) -> list[int]:
    """The 32-bit numbers one word of a host name can spell: eight hex digits, `0x...`, eight or more digits
    (decimal, or octal after a leading zero)."""
    values: list[int] = []
    if _HEX8.fullmatch(word):
        values.append(int(word, 16))
    if word.startswith("0x") and len(word) > 2 and _NUMBER.fullmatch(word):
        values.append(int(word, 16))
    if word.isdigit() and len(word) >= 8:
        if word.startswith("0") and all(c in "01234567" for c in word):
            values.append(int(word, 8))
        elif int(word) >= 1 << 24:  # below, `0.x.y.z`: no address a service would answer with
            values.append(int(word))
    return values


def _spelled(host: str) -> list[_IP]:
    """The addresses a wildcard DNS service (nip.io, sslip.io, xip.io and the like) could read in `host`:
    `127.0.0.1.nip.io`, `10-0-0-1.sslip.io`, `0251.0376.0251.0376.nip.io`, `2852039166.nip.io`,
    `0xa9fea9fe.nip.io`, `a9fea9fe.nip.io`, `fd00-ec2--254.sslip.io`."""
    found: list[_IP] = []
    words = re.split(r"[.-]", host)
    for start in range(len(words)):
        for length in (4, 3, 2):
            run = words[start:start + length]
            if len(run) == length and all(_NUMBER.fullmatch(w) for w in run):
                ip = _address(".".join(run))
                if ip is not None:
                    found.append(ip)
        for value in _numbers(words[start]):
            if value < 1 << 32:
                found.append(ipaddress.IPv4Address(value))
    for label in host.split("."):
        if "-" in label and _V6_LABEL.fullmatch(label):
            with contextlib.suppress(ValueError):
                found.append(ipaddress.IPv6Address(label.replace("-", ":")))
    return found


def _special(ip: _IP) -> bool:
    if ip in _METADATA:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in (ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None):
            if inner is not None and _special(inner):
                return True
    return not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_unspecified


def _matches(host: str, ip: _IP | None, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        pattern = pattern.lower().rstrip(".")
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif "/" in pattern and ip is not None:
            try:
                if ip in ipaddress.ip_network(pattern, strict=False):
                    return True
            except ValueError:
                continue
        elif host == pattern or (ip is not None and _address(pattern) == ip):
            return True
    return False


def host_allowed(host: str, rules: UrlRules) -> bool:
    ip = _address(host)
    if _matches(host, ip, rules.deny_hosts):
        return False
    if _matches(host, ip, rules.allow_hosts):
        return True
    if ip is not None:
        return not _special(ip)
    if host.endswith("]") or host.startswith("["):
        return False
    if any(c.isdigit() for c in host) and any(_special(inner) for inner in _spelled(host)):
        return False  # wildcard DNS answers with the address the name spells, in any spelling it reads
    if any(host == name or host.endswith("." + name) for name in _METADATA_NAMES):
        return False
    labels = host.split(".")
    if any(host == name or host.endswith("." + name) for name in _SPECIAL_NAMES) or len(labels) < 2:
        return False  # a bare single-label name resolves inside the network (`metadata`, `intranet`)
    if not all(labels):
        return False
    return not rules.resolve or host.endswith(_DOCUMENTATION) or _answers_allowed(host, rules)


def _answers_allowed(host: str, rules: UrlRules) -> bool:
    """Whether every address the name resolves to now is allowed (proxy/policy/urls/resolve.py); a name that
    does not exist passes, one that did not answer in time does not."""
    answers = lookup(host, rules.resolve_timeout_ms / 1000)
    if answers is NOT_RESOLVED:
        return False
    for answer in answers:
        ip = _address(answer)
        if ip is None or _matches(answer, ip, rules.deny_hosts):
            return False
        if not _matches(answer, ip, rules.allow_hosts) and _special(ip):
            return False
    return True


def url_problem(value: str, rules: UrlRules) -> str | None:
    """`url` when the URL's scheme or host is refused (or it cannot be read unambiguously), else None."""
    if not isinstance(value, str) or any(c.isspace() or ord(c) < 0x20 or c == "\\" for c in value):
        return "url"
    if not _HAS_SCHEME.match(value):
        value = "https://" + value  # what a client that completes `example.com/x` would fetch
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "url"
    if parts.scheme not in rules.schemes:
        return "url"
    if parts.scheme in ("file",):
        return "url"
    raw = parts.hostname
    authority = parts.netloc.rpartition("@")[2]
    if not raw or "%" in authority:
        return "url"
    if authority.startswith("[") and _address(raw) is None:
        return "url"  # `[v1.x]`: an IPvFuture literal, or anything else in brackets, names no public host
    try:  # IDNA maps full-width digits and look-alikes to what a browser would resolve
        host = raw.encode("idna").decode("ascii").lower() if not raw.isascii() else raw.lower()
    except UnicodeError:
        return "url"
    host = host.rstrip(".") if not host.endswith("..") else host
    if not host or not host_allowed(host, rules):
        return "url"
    return None
