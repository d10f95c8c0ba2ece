"""What stopping secrets by content costs on the request path (issue 38; budget: under 1 ms per 100 KB of tool
results), before and after, in one run.

    python bench/secrets_bench.py [--repeat 30] [--kb 100]

Tool results of `--kb` KB each, of four kinds (this repository's Python sources, its docs, a lock file, minified
JavaScript from an installed package where one is there), without a secret and with the corpus' secrets
(tests/secrets_corpus.py) spread through them. For each it times, best of `--repeat`:
- `detect`: the detector alone over the text (the rules' one gate pass, then the rules where it matched);
- `before`: what the request path did with such a chat body before: read it (jiter, as `read_payload`);
- `after`: the same plus the redaction step (`redact_request`) of text the process has not seen before;
- `again`: the same body once more: a conversation sends its earlier tool results with every turn, and each
  text is scanned once per process (only the walk and a digest per text are left).
It prints ms per 100 KB and the ratio after/before. With `detect_secrets` importable (Yelp's detector, not a
dependency: `pip install detect-secrets` in a scratch environment), it also times its default plugins over the
same text, line by line as its scanner does, for the comparison in docs/decisions/0114-secrets-by-content.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.enforce import secrets  # noqa: E402
from proxy.enforce.payload import read_json_object  # noqa: E402
from proxy.enforce.secrets import redact_request  # noqa: E402
from proxy.policy.schema import Policy  # noqa: E402
from proxy.policy.secrets import find_secrets, load_rules  # noqa: E402
from tests.secrets_corpus import SECRETS  # noqa: E402

POLICY = Policy.model_validate({"name": "bench"})


def _gather(pattern: str, size: int, base: Path = ROOT) -> str:
    text = ""
    for path in sorted(base.glob(pattern)):
        try:
            text += path.read_text(errors="replace")
        except OSError:
            continue
        if len(text) >= size:
            break
    return text[:size]


def _samples(size: int) -> dict[str, str]:
    found = {"python": _gather("proxy/**/*.py", size), "docs": _gather("docs/**/*.md", size),
             "lock": (ROOT / "requirements.lock").read_text() * (size // 2000 + 1)}
    found["lock"] = found["lock"][:size]
    cache = Path.home() / ".cache"
    minified = ""
    for base in sorted(cache.glob("allowlist-proxy-e2e*")):
        minified = _gather("**/*.min.js", size, base)
        if minified:
            break
    if minified:
        found["minified js"] = minified
    return found


def _with_secrets(text: str) -> str:
    secrets = [t for _, _, t, _ in SECRETS]
    step = max(1, len(text) // (len(secrets) + 1))
    pieces, cursor = [], 0
    for secret in secrets:
        cut = text.find("\n", cursor + step)
        if cut < 0:
            break
        pieces += [text[cursor:cut + 1], secret]
        cursor = cut + 1
    pieces.append(text[cursor:])
    return "".join(pieces)[: len(text) + 20_000]


def _chat_body(text: str) -> bytes:
    """A chat request whose tool results (20 of them) hold `text`."""
    parts = [text[i:i + len(text) // 20 + 1] for i in range(0, len(text), len(text) // 20 + 1)]
    messages: list[dict[str, object]] = [{"role": "system", "content": "You are a coding agent."},
                                         {"role": "user", "content": "look at the project"}]
    for n, part in enumerate(parts):
        call = f"call_{n}"
        arguments = json.dumps({"filePath": f"f{n}"})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "read", "arguments": arguments}}]})
        messages.append({"role": "tool", "tool_call_id": call, "content": part})
    return json.dumps({"model": "m", "messages": messages, "stream": True}).encode()


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _before(body: bytes) -> None:
    read_json_object(body)


def _after(body: bytes) -> None:
    secrets.forget_texts()  # text never seen: every result scanned
    _again(body)


def _again(body: bytes) -> None:
    payload = read_json_object(body)
    redact_request(body, payload["messages"], "chat", POLICY)


def _detect_secrets_timer() -> Callable[[str], None] | None:
    try:
        from detect_secrets.core.scan import _process_line_based_plugins  # type: ignore[import-not-found]
        from detect_secrets.settings import default_settings  # type: ignore[import-not-found]
    except ImportError:
        return None

    def scan(text: str) -> None:
        with default_settings():
            lines = list(enumerate(text.splitlines(), 1))
            list(_process_line_based_plugins(lines, filename="tool_result.txt"))
    return scan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--kb", type=int, default=100)
    args = parser.parse_args()
    size = args.kb * 1000
    rules = load_rules()
    other = _detect_secrets_timer()
    print(f"load average {os.getloadavg()[0]:.2f}; {len(rules.rules)} rules; ms per 100 KB, best of {args.repeat}")
    header = (f"{'text':24} {'detect':>8} {'before':>8} {'after':>8} {'added':>8} {'after/before':>13} "
              f"{'again':>8} {'again/before':>13}")
    print(header + (f" {'detect-secrets':>15}" if other else ""))
    for kind, clean in _samples(size).items():
        for label, text in ((kind, clean), (f"{kind} + secrets", _with_secrets(clean))):
            data = text.encode()
            scale = 100_000 / len(data)
            body = _chat_body(text)
            detect = _best(lambda data=data: find_secrets(data, rules), args.repeat) * scale
            before = _best(lambda body=body: _before(body), args.repeat) * scale
            after = _best(lambda body=body: _after(body), args.repeat) * scale
            again = _best(lambda body=body: _again(body), args.repeat) * scale
            row = (f"{label:24} {detect * 1e3:8.3f} {before * 1e3:8.3f} {after * 1e3:8.3f} "
                   f"{(after - before) * 1e3:8.3f} {after / before:13.2f} {again * 1e3:8.3f} {again / before:13.2f}")
            if other:
                row += f" {_best(lambda text=text: other(text), max(3, args.repeat // 10)) * scale * 1e3:15.1f}"
            print(row)


if __name__ == "__main__":
    main()
