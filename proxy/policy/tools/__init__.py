"""Tools onto capabilities: which of a request's tools run commands, open paths or fetch URLs.

`profiles` (the built-in and policy profiles of the clients' tools, chosen per request), `offered` (a request's
tools as offered), `classify` (the schema of a tool no profile knows: fail closed on what could carry a command,
a path, a directory, a URL or patch text), `content` (whole values that are a path or a URL, wherever no rule
says what an argument holds).
"""

from __future__ import annotations

from .classify import classify
from .content import content_findings, value_problem
from .offered import offered_tools
from .profiles import ToolSet, profile_table

__all__ = ["ToolSet", "classify", "content_findings", "offered_tools", "profile_table", "value_problem"]
