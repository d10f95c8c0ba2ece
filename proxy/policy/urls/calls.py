"""The URL capability of a call: every URL it fetches, against `urls:`."""

from __future__ import annotations

from collections.abc import Iterator

from ..call import Call, Finding, strings
from .rules import url_problem

__all__ = ["url_findings"]


def url_findings(call: Call) -> Iterator[Finding]:
    for spec in call.map.urls:
        for label, value in call.values(spec):
            for url in strings(value):
                problem = url_problem(url, call.policy.urls)
                if problem is not None:
                    yield call.found(problem, label)
