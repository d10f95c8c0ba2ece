"""A project key as text: made, recognised, hashed, masked, and read from a request's headers.

A key is `alp_` + 36 random base62 characters + a 6-character checksum of them (CRC32 in base62), as GitHub's
tokens are built: the prefix lets secret scanners find a leaked key and lets the proxy tell its own keys from a
client's upstream credential; the checksum lets a typo or a made-up string be refused without a lookup. 36
characters of base62 are 214 random bits, so the store keeps only the SHA-256 of a key (a keyed hash would add
nothing against guessing; it is what LiteLLM's virtual keys and GitHub's tokens keep too).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import string
import zlib
from collections.abc import Mapping

__all__ = ["KEY_PATTERN", "PREFIX", "is_key", "key_hash", "masked", "new_key", "presented"]

PREFIX = "alp_"
_ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase
_RANDOM, _CHECK = 36, 6
# Any text shaped like a key (the checksum not checked): what never goes upstream, into a log or an error.
KEY_PATTERN = re.compile(rf"{PREFIX}[0-9A-Za-z]{{{_RANDOM + _CHECK}}}(?![0-9A-Za-z])")


def _base62(number: int, width: int) -> str:
    out = []
    for _ in range(width):
        number, digit = divmod(number, 62)
        out.append(_ALPHABET[digit])
    return "".join(reversed(out))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode()), _CHECK)


def new_key() -> str:
    """A new key, from the operating system's random source."""
    body = "".join(secrets.choice(_ALPHABET) for _ in range(_RANDOM))
    return PREFIX + body + _checksum(body)


def is_key(text: str) -> bool:
    """`text` is a whole well-formed key, its checksum right."""
    if len(text) != len(PREFIX) + _RANDOM + _CHECK or not KEY_PATTERN.fullmatch(text):
        return False
    body = text[len(PREFIX):len(PREFIX) + _RANDOM]
    return secrets.compare_digest(_checksum(body), text[-_CHECK:])


def key_hash(key: str) -> str:
    """What the store keeps of a key."""
    return hashlib.sha256(key.encode()).hexdigest()


def masked(key: str) -> str:
    """A key as it may be shown: the prefix and four characters (24 of its 214 random bits)."""
    return key[:len(PREFIX) + 4] + "…"


def presented(headers: Mapping[str, str]) -> list[str]:
    """The credentials a request presents, in the headers a client puts its API key in: `Authorization: Bearer`
    (OpenAI's clients, and Anthropic's given an auth token) and `x-api-key` (Anthropic's clients given an API key).
    Empty and repeated values are left out."""
    found: list[str] = []
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            found.append(token.strip())
    if (api_key := (headers.get("x-api-key") or "").strip()) and api_key not in found:
        found.append(api_key)
    return found
