"""Names as other filesystems read them: the other forms under which a folded path names a protected file.

The agent may run on macOS or Windows while the proxy judges its paths here; each of these names the same
file there as the plain spelling, so a protected path is compared under every one of them (each form only
ever adds a refusal):
- HFS+ ignores the default-ignorable code points (zero-width joiners, bidi marks, variation selectors, the
  Hangul fillers, tags): `.g\\u200cit/config` is `.git/config`;
- NTFS reads an alternate data stream after a colon (`.git::$INDEX_ALLOCATION/hooks/pre-commit` is the
  directory `.git`, `run.py::$DATA` the file, `notes:hidden` a stream of `notes`) and drops trailing dots and
  spaces (already folded);
- NTFS 8.3 short names: `GIT~1` and `SCRIPT~1` open `.git` and `scripts`; a `~N` component stands for every
  name it could abbreviate (the first up to six characters of the name without dots and spaces, or two and a
  four-digit hash, and up to three of its extension), so each protected name it could be is tried in its place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

__all__ = ["abbreviates", "literal_names", "other_spellings"]

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, 15.1).
_IGNORABLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
                        "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
                        "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
_SHORT = re.compile(r"([^~./]{1,8})~([0-9]{1,6})(?:\.([^./]{0,3}))?")
_DRIVE = re.compile(r"[a-z]:")
_WILDCARDS = re.compile(r"[*?\[]")
_MAX_FORMS = 64


def literal_names(patterns: Iterable[str]) -> dict[str, str]:
    """The names a short name could stand for, each segment of each (folded) pattern: a concrete name that
    the segment matches (a wildcard read as `x`: `.env.*` gives `.env.x`), and the segment itself."""
    names: dict[str, str] = {}
    for pattern in patterns:
        for segment in pattern.split("/"):
            if segment and segment not in (".", ".."):
                names.setdefault(_WILDCARDS.sub("x", segment.replace("[!", "[")).replace("]", ""), segment)
    return names


def _clean(text: str) -> str:
    return re.sub(r"[+,;=\[\] ]", "_", text.replace(" ", ""))


def _extension(short: str, long: str) -> bool:
    """A short name keeps the first three characters of the extension: fewer means that was all of it."""
    cleaned = _clean(long)
    return cleaned.startswith(short) if len(short) == 3 else cleaned == short


def abbreviates(short: str, name: str) -> bool:
    """Whether the (folded) 8.3 short name `short` could be one Windows made for `name`, or for a name that
    `name` (a pattern segment: `*`, `?`, `[...]`) matches."""
    found = _SHORT.fullmatch(short)
    if found is None:
        return False
    base, ext = found.group(1), found.group(3) or ""
    stem = name.lstrip(".")
    wild = _WILDCARDS.search(stem)
    if wild is not None:  # the literal text before the first wildcard, and a literal extension after the last
        # Windows keeps six characters of a longer base: a shorter short base means the whole base was that short,
        # which a pattern whose base holds more literal characters (`*.secrets.*`) never is.
        literal = _clean(_WILDCARDS.sub("", stem.rpartition(".")[0] if "." in stem else stem).replace(".", ""))
        if len(base) < 6 and len(literal) > len(base):
            return False
        head = _clean(stem[:wild.start()].replace(".", ""))
        tail = stem.rpartition(".")[2]
        if ext and "." in stem and not _WILDCARDS.search(tail) and not _extension(ext, tail):
            return False
        return head.startswith(base) or base.startswith(head)
    long_base, dot, long_ext_text = stem.rpartition(".")
    if not dot:
        long_base, long_ext_text = stem, ""
    long_base = _clean(long_base.replace(".", ""))
    if ext and not _extension(ext, long_ext_text):
        return False
    if long_base.startswith(base):
        return True
    # The hashed form Windows falls back to: two characters of the name and four hex digits.
    return len(base) == 6 and re.fullmatch(r"[0-9a-f]{4}", base[2:]) is not None and long_base.startswith(base[:2])


def other_spellings(folded: str, names: Mapping[str, str], fold: Callable[[str], str]) -> list[str]:
    """The forms a macOS or Windows reader would take `folded` (a folded path) for, besides itself."""
    if folded.isascii() and ":" not in folded and "~" not in folded:
        return []
    text = _IGNORABLE.sub("", folded)
    segments = text.split("/")
    for index, segment in enumerate(segments):
        if ":" in segment and not (index == 0 and _DRIVE.fullmatch(segment)):
            segments[index] = segment.split(":", 1)[0]
    forms = [fold("/".join(segments))]
    for index, segment in enumerate(forms[0].split("/")):
        if "~" not in segment:
            continue
        expanded: list[str] = []
        for form in forms:
            parts = form.split("/")
            expanded.append(form)
            for name, segment in names.items():
                if abbreviates(parts[index], segment):
                    expanded.append("/".join([*parts[:index], name, *parts[index + 1:]]))
        forms = expanded[:_MAX_FORMS]
    return [form for form in dict.fromkeys(forms) if form != folded]
