"""No policy file cut short ever becomes the active policy; ConfigMap-style symlink swaps are seen."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from proxy.policy import PolicyManager
from proxy.policy.errors import PolicyError
from proxy.policy.file.loader import load_policy_file, load_policy_text, policy_document
from proxy.policy.file.reload_guard import reload_problem
from proxy.policy.judge import judge_call

STRICT = Path(__file__).resolve().parents[2] / "policies" / "strict.yaml"

# Calls the full strict policy rejects: escaping and absolute paths for every path tool, shell forms.
REJECTED = [
    *((tool, {"filePath": path, "content": "x", "oldString": "a", "newString": "b"})
      for tool in ("read", "edit", "write") for path in ("/etc/cron.d/job", "/etc/passwd", "../up.txt")),
    *((tool, {"pattern": "*", "path": path}) for tool in ("glob", "grep") for path in ("/etc", "../..")),
    *(("bash", {"command": command}) for command in (
        "cat /etc/passwd", "uv run scripts/search.py | head -5", "timeout 30 uv run scripts/search.py",
        "uv run scripts/search.py --no-agent", "uv run scripts/other.py", "curl http://x", "rm -rf /")),
    ("bash", {"command": "uv run scripts/search.py", "workdir": "../elsewhere"}),
]


def test_no_prefix_of_strict_yaml_is_taken_as_a_wider_policy() -> None:
    raw = STRICT.read_bytes()
    full = load_policy_text(raw)
    assert not any(judge_call(full.policy, tool, args).allowed for tool, args in REJECTED)
    loaded = taken = 0
    documents: set[str] = set()
    for cut in range(len(raw)):
        try:
            document = policy_document(raw[:cut])
        except PolicyError:
            continue
        if document in documents:
            continue  # a cut inside a comment or blank: the same policy as a shorter one, already judged
        documents.add(document)
        try:
            candidate = load_policy_text(raw[:cut])
        except PolicyError:
            continue
        loaded += 1
        if reload_problem(full, candidate) is not None:
            continue
        taken += 1
        wider = [(tool, args) for tool, args in REJECTED if judge_call(candidate.policy, tool, args).allowed]
        assert wider == [], f"the prefix of {cut} bytes would be taken and allows {wider[0]}"
    assert loaded > 0  # prefixes do load on their own; the guard is what refuses them
    assert taken == 0 or taken < loaded


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    old = time.time() - 5  # settled: the reload does not wait for the file to hold still
    os.utime(path, (old, old))


def test_a_live_file_cut_after_a_path_rule_is_refused_and_a_widening_is_held_until_sighup(tmp_path: Path) -> None:
    # The policy format the first release shipped (`bash:`, `paths: {tool: argument}`), which operators'
    # files still use: there a cut after `edit: filePath` drops the `write` rule.
    policy = tmp_path / "strict.yaml"
    full = (Path(__file__).parent / "strict_legacy_format.yaml").read_text()
    _write(policy, full)
    manager = PolicyManager(policy)
    served = manager.current().hash
    _write(policy, full[: full.index("  write: filePath")])  # the cut that let a write to /etc/cron.d through
    assert manager.reload() is False and manager.current().hash == served
    assert "reload refused" in manager.status()["errors"][0]["message"]
    widened = full.replace("    summarize: {}\n", "    summarize: {}\n    report: {}\n")
    _write(policy, widened.replace("\n...\n", "\n"))  # allows more, not confirmed complete: refused
    assert manager.reload() is False and manager.current().hash == served
    _write(policy, widened)  # ends with `...`, complete, but it widens: held until the operator applies it
    assert manager.reload() is False and manager.current().hash == served
    held = manager.status()["held"]
    assert [h["hash"] for h in held] == [load_policy_file(policy).hash] and "SIGHUP" in held[0]["reason"]
    assert manager.reload(explicit=True) is True and manager.current().hash != served  # SIGHUP
    assert manager.status()["held"] == []
    narrowed = widened.replace("    report: {}\n", "").replace("\n...\n", "\n")
    _write(policy, narrowed)  # allows less: taken at once, marker or not
    assert manager.reload() is True


def test_a_change_of_what_the_statistics_count_is_held_until_sighup(tmp_path: Path) -> None:
    """Raised to 100 live, `loop_min_attempts` would empty the loop figures; lowered, it would inflate them:
    either way the reload is held like a widening (issue 38)."""
    policy = tmp_path / "strict.yaml"
    full = STRICT.read_text()
    _write(policy, full)
    manager = PolicyManager(policy)
    served = manager.current().hash
    for value in ("100", "2"):
        _write(policy, full.replace("loop_min_attempts: 3 ", f"loop_min_attempts: {value} ", 1))
        assert manager.reload() is False and manager.current().policy.loop_min_attempts == 3
        held = manager.status()["held"]
        assert "statistics count" in held[-1]["reason"] and "SIGHUP" in held[-1]["reason"], held
    assert manager.reload(explicit=True) is True and manager.current().hash != served  # SIGHUP applies it
    assert manager.current().policy.loop_min_attempts == 2


def test_a_configmap_symlink_swap_is_picked_up(tmp_path: Path) -> None:
    full = STRICT.read_text()
    first, second = tmp_path / "..2026_12_03_a", tmp_path / "..2026_12_03_b"
    first.mkdir()
    (first / "strict.yaml").write_text(full)
    (tmp_path / "..data").symlink_to(first.name)
    (tmp_path / "strict.yaml").symlink_to("..data/strict.yaml")

    async def scenario() -> bool:
        manager = PolicyManager(tmp_path / "strict.yaml", debounce_ms=50)
        before = manager.current().hash
        await manager.start()
        try:
            await asyncio.sleep(0.3)
            second.mkdir()
            (second / "strict.yaml").write_text(full.replace("retry_budget: 3", "retry_budget: 2"))
            (tmp_path / "..data_tmp").symlink_to(second.name)
            os.rename(tmp_path / "..data_tmp", tmp_path / "..data")  # what the kubelet does
            deadline = time.monotonic() + 5
            while manager.current().hash == before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return manager.current().policy.retry_budget == 2
        finally:
            await manager.stop()

    assert asyncio.run(scenario())


def test_yaml_alias_bomb_is_refused_in_under_a_second() -> None:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join(['*a' + str(i - 1)] * 9)}]" for i in range(1, 10)]
    started = time.perf_counter()
    try:
        load_policy_text("name: bomb\n" + "\n".join(lines) + "\n")
    except PolicyError as error:
        assert "expands to more than" in error.message
    else:
        raise AssertionError("the bomb loaded")
    assert time.perf_counter() - started < 1


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as handle:
        handle.truncate(1 << 30)  # sparse: 1 GiB that costs nothing unless read
    started = time.perf_counter()
    try:
        load_policy_file(huge)
    except PolicyError as error:
        assert "larger than" in error.message
    assert time.perf_counter() - started < 0.5


def test_an_example_with_null_arguments_does_not_break_the_guard() -> None:
    # A call whose arguments did not parse is malformed under any policy: the guard has nothing to probe.
    raw = STRICT.read_text()
    served = load_policy_text(raw)
    marker = "  reject:\n"
    assert marker in raw
    edited = raw.replace(marker, marker + "    - {tool: bash, arguments: null}\n", 1).rstrip().removesuffix("...")
    candidate = load_policy_text(edited)
    assert not candidate.complete  # so the guard probes it
    assert reload_problem(served, candidate) is None


def test_a_widening_no_sample_call_touches_is_not_taken_live() -> None:
    """Allowing the metadata address (or `file:` URLs) changes no probe's verdict; the structural check
    (proxy/policy/file/widening.py) still holds the edit, and `...` at the end does not apply it (only SIGHUP does)."""
    raw = STRICT.read_text()
    served = load_policy_text(raw)
    assert raw.rstrip().endswith("...")
    for old, new in (("allow_hosts: []", "allow_hosts: [169.254.169.254]"),
                     ("schemes: [http, https]", "schemes: [http, https, file]")):
        assert old in raw
        edited = raw.rstrip().removesuffix("...").replace(old, new, 1)
        candidate = load_policy_text(edited)
        assert reload_problem(served, candidate) is not None, new
        assert "held" in (reload_problem(served, load_policy_text(edited + "\n...\n")) or "")
