"""Which characters may appear in a command's text at all.

Shared by the decision lexer and the explanation, so both draw the same line. Non-ASCII text is data the
shells pass through untouched (UTF-8 never yields an ASCII byte), but a character a reviewer cannot see, or
one that moves or hides other text, is refused wherever it stands.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = ["SAFE_UNQUOTED", "is_invisible", "visible_non_ascii"]

# Characters a word may carry unquoted: none of them is special to bash, dash or zsh (`=` only at the
# start of a word, where zsh expands `=cmd`, which the lexer checks separately).
SAFE_UNQUOTED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,+@%-")

# Control, format (bidi overrides, zero-width joiners), surrogate, private-use, unassigned, and every
# kind of space or separator but the ASCII space.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})

# Unicode's Default_Ignorable_Code_Point set plus blank-looking letters and symbols: printable by
# category, invisible on screen.
_INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x2800, 0x2800),  # braille blank
    (0x3164, 0x3164),  # hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFFB),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),  # tags, variation selectors supplement
)


@lru_cache(maxsize=4096)
def is_invisible(ch: str) -> bool:
    """True for a non-ASCII character that is not plainly visible text."""
    cp = ord(ch)
    if any(lo <= cp <= hi for lo, hi in _INVISIBLE_RANGES):
        return True
    return unicodedata.category(ch) in _BAD_CATEGORIES


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def visible_non_ascii(text: str) -> bool:
    """True when every non-ASCII character of `text` is visible text (ASCII characters are not judged)."""
    return not any(is_invisible(ch) for ch in _NON_ASCII.findall(text))
