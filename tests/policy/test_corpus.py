"""The shared corpus (tests/bash-allowlist.jsonl): every `expect` holds exactly; reasons mostly agree."""

from __future__ import annotations

import pytest

from proxy.policy import Policy, judge_command
from proxy.policy.reasons import REASON_CODES

from .conftest import load_corpus

CORPUS = load_corpus()


def _id(case: dict) -> str:
    return repr(case["cmd"][:60])


@pytest.mark.parametrize("case", CORPUS, ids=[_id(c) for c in CORPUS])
def test_expect_holds(policy: Policy, case: dict) -> None:
    verdict = judge_command(policy, case["cmd"])
    assert verdict.decision == case["expect"], (case["why"], verdict)
    if case["expect"] == "allow":
        assert verdict.reasons == () and verdict.shape is None
    else:
        assert verdict.reasons, "a rejection always names at least one reason"
        assert set(verdict.reasons) <= REASON_CODES
        assert verdict.shape and verdict.shape.split(":", 1)[0] == verdict.reasons[0]


def test_reason_agreement(policy: Policy) -> None:
    rejected = [c for c in CORPUS if c["expect"] == "reject"]
    primary = same_set = 0
    misses = []
    for case in rejected:
        reasons = judge_command(policy, case["cmd"]).reasons
        primary += reasons[:1] == tuple(case["reasons"][:1])
        same_set += set(reasons) == set(case["reasons"])
        if set(reasons) != set(case["reasons"]) or reasons[:1] != tuple(case["reasons"][:1]):
            misses.append(f"  {case['cmd'][:60]!r}: corpus {case['reasons']}, engine {list(reasons)}")
    n = len(rejected)
    print(
        f"\nreason agreement over {n} rejected corpus cases: primary {primary}/{n} = {100 * primary / n:.1f}%,"
        f" same set {same_set}/{n} = {100 * same_set / n:.1f}%"
    )
    print("\n".join(misses))
    assert primary / n >= 0.97
    assert same_set / n >= 0.93
