"""The secrets corpus (tests/secrets_corpus.py) through the detector: every secret found by a rule of its kind and
gone from the redacted text, every look-alike passing unchanged; the table (kind, found, missed, false positives)
is printed (`pytest -s`)."""

from __future__ import annotations

from collections import defaultdict

from proxy.policy.secrets import compile_pattern, load_rules, redact_texts, replacement
from tests.secrets_corpus import LOOK_ALIKES, SECRETS


def _table() -> tuple[dict[str, list[int]], list[str], list[str]]:
    rules = load_rules()
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # found, missed, false positives
    missed, passed_wrongly = [], []
    for (kind, types, _text, values), result in zip(SECRETS, redact_texts([s[2] for s in SECRETS], rules),
                                                   strict=True):
        ok = result is not None and all(v not in result.text for v in values) and set(result.counts) <= set(types)
        rows[kind][0 if ok else 1] += 1
        if not ok:
            missed.append(f"{kind}: {values[0][:12]!r}... -> {result.counts if result else None}")
    for (kind, _), result in zip(LOOK_ALIKES, redact_texts([t for _, t in LOOK_ALIKES], rules), strict=True):
        if result is not None:
            rows[kind][2] += 1
            passed_wrongly.append(f"{kind}: {result.text[:120]!r}")
        else:
            rows.setdefault(kind, [0, 0, 0])
    return rows, missed, passed_wrongly


def test_corpus_size() -> None:
    assert len(SECRETS) >= 40 and len({kind for kind, *_ in SECRETS}) >= 15
    assert len(LOOK_ALIKES) >= 40


def test_every_secret_found_and_every_look_alike_passes() -> None:
    rows, missed, false_positives = _table()
    print(f"\n{'kind':34} found missed false+")
    for kind, (found, miss, fp) in rows.items():
        print(f"{kind:34} {found:5} {miss:6} {fp:6}")
    print(f"{'total':34} {sum(r[0] for r in rows.values()):5} {sum(r[1] for r in rows.values()):6} "
          f"{sum(r[2] for r in rows.values()):6}")
    assert not missed, missed
    assert not false_positives, false_positives


def test_the_same_text_gives_the_same_bytes() -> None:
    rules = load_rules()
    texts = [text for _, _, text, _ in SECRETS]
    first = [r.text if r else None for r in redact_texts(texts, rules)]
    again = [r.text if r else None for r in redact_texts(list(reversed(texts)), rules)]
    assert first == list(reversed(again))
    assert all(text is not None and "[redacted: " in text for text in first)


def test_a_secret_across_texts_joined_is_found_text_by_text() -> None:
    rules = load_rules()
    pem = SECRETS[0][2]
    head, tail = pem[:40], pem[40:]
    results = redact_texts([head, tail, "plain"], rules)
    assert results == [None, None, None]  # neither half is a key on its own
    results = redact_texts(["x" * 10, pem, "token: " + SECRETS[0][3][0][:5]], rules)
    assert results[1] is not None and results[1].counts == {"private-key": 1}


def test_an_allow_pattern_lets_a_secret_through() -> None:
    rules = load_rules()
    text = next(text for kind, _, text, _ in SECRETS if kind == "GitHub token")
    assert redact_texts([text], rules)[0] is not None
    assert redact_texts([text], rules, allow=[compile_pattern(r"^gh[po]_")])[0] is None


def test_replacement_names_the_rule() -> None:
    assert replacement("github-pat") == "[redacted: github-pat]"


def test_turning_redaction_off_or_allowing_more_is_a_widening_edit() -> None:
    from proxy.policy.file.widening import widenings
    from proxy.policy.schema import Policy

    on = Policy.model_validate({"name": "p"})
    assert on.secrets.redact is True and on.secrets.allow == []
    off = Policy.model_validate({"name": "p", "secrets": {"redact": False}})
    allowing = Policy.model_validate({"name": "p", "secrets": {"allow": ["^sk_test_"]}})
    assert widenings(on, off) == ["secrets.redact: on -> off"]
    assert widenings(on, allowing) == ["secrets.allow: added '^sk_test_'"]
    assert widenings(off, on) == [] and widenings(allowing, on) == []


def test_an_allow_pattern_re2_cannot_read_is_refused_with_its_key() -> None:
    import pydantic
    import pytest

    from proxy.policy.schema import Policy

    with pytest.raises(pydantic.ValidationError, match=r"allow\[0\] is not a pattern RE2 reads"):
        Policy.model_validate({"name": "p", "secrets": {"allow": ["(?<=x)y"]}})
