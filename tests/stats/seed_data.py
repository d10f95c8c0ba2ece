"""The seed's traffic, by construction: three models with 21/17/20 sessions, 161/128/158 tool calls and
9/13/19 errors, which the seed's author tabulated by hand as 5.6%, 10.2% and 12.0% errors per tool call."""

from __future__ import annotations

from .builder import ALLOWED, PIPE, Store

SEED = (
    # model, sessions, tool calls, errors
    ("qwen3.5-9b", 21, 161, 9),
    ("qwen3.5-27b", 17, 128, 13),
    ("qwen3.6-35b-a3b", 20, 158, 19),
)
SEED_TABLE = [
    "Model           | Sessions | Tool calls | Errors | Err/tool",
    "----------------+----------+------------+--------+---------",
    "qwen3.5-27b     |       17 |        128 |     13 |    10.2%",
    "qwen3.5-9b      |       21 |        161 |      9 |     5.6%",
    "qwen3.6-35b-a3b |       20 |        158 |     19 |    12.0%",
]
# The errors cycle through these; each is followed by an allowed call, so no loops and full recovery.
ERROR_KINDS = (
    PIPE,                                  # reject: pipe
    "timeout 30 uv run scripts/search.py",  # reject: wrapper
    "cd src && uv run scripts/search.py",   # reject: cd, chain
    None,                                  # malformed: bad_arguments
)


def build_seed(store: Store) -> dict[str, dict[str, int]]:
    """Adds the seed's traffic; returns the reason counts it contains, per model."""
    reasons: dict[str, dict[str, int]] = {}
    for model, n_sessions, n_calls, n_errors in SEED:
        reasons[model] = {}
        sessions = [store.session(model) for _ in range(n_sessions)]
        # Calls dealt round-robin to the sessions; one request per two calls of a session.
        per_session = [n_calls // n_sessions + (i < n_calls % n_sessions) for i in range(n_sessions)]
        errors_left = n_errors
        for session, n in zip(sessions, per_session, strict=True):
            made = 0
            while made < n:
                request = session.request(attempts=1 + (made // 2) % 2)
                for _ in range(min(2, n - made)):
                    # Error calls: the first call of the first sessions, never the session's last call.
                    if made == 0 and errors_left and n > 1:
                        kind = ERROR_KINDS[(n_errors - errors_left) % len(ERROR_KINDS)]
                        if kind is None:
                            request.call(tool="bash", raw='{"command": "uv run scri')
                        else:
                            request.call(kind)
                        errors_left -= 1
                    else:
                        request.call(ALLOWED)
                    made += 1
        assert errors_left == 0, model
    for row in store.rows["tool_call_reasons"]:
        model = row["model"]
        reasons[model][row["reason"]] = reasons[model].get(row["reason"], 0) + 1
    return reasons
