"""Policy files: the shipped ones load and self-test; bad files are refused with file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.policy import Policy, PolicyError, default_policy_path, load_policy_file

from .conftest import DESIGN_POLICY, ROOT

SHIPPED = ["strict.yaml", "observe.yaml"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_policies_load_and_self_test(name: str) -> None:
    loaded = load_policy_file(ROOT / "policies" / name)
    assert loaded.policy.examples.allow and loaded.policy.examples.reject
    assert len(loaded.hash) == 16 and int(loaded.hash, 16) >= 0


def test_strict_is_design_policy() -> None:
    loaded = load_policy_file(ROOT / "policies" / "strict.yaml")
    assert (loaded.name, loaded.policy.mode) == ("strict-uv-scripts", "enforce")
    design = Policy.model_validate(DESIGN_POLICY)
    # The same rules; the shipped feedback is per capability (a rejected read is not told about scripts) and
    # the shipped file adds what the model reads (script descriptions and instead_of, {suggestion}).
    same = {"examples", "feedback"}
    shipped, expected = (p.model_dump(exclude=same) for p in (loaded.policy, design))
    for script in shipped["bash"]["scripts"].values():
        script.update(description=None, instead_of=[], args=None)  # argument rules: issue 24
    assert shipped["urls"].pop("resolve") is True  # names resolved when judged: issue 24, on where shipped
    expected["urls"].pop("resolve")
    assert shipped == expected
    assert loaded.policy.feedback_template("shell").startswith("Rejected ({reasons}): ")
    assert "{suggestion}" in loaded.policy.feedback_template("shell")
    assert "uv run" not in loaded.policy.feedback_template("paths") + loaded.policy.feedback_template("other")


def test_observe_policy() -> None:
    loaded = load_policy_file(ROOT / "policies" / "observe.yaml")
    assert (loaded.name, loaded.policy.mode) == ("observe-uv-scripts", "observe")
    strict = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    assert loaded.policy.bash == strict.bash and loaded.policy.paths == strict.paths


@pytest.mark.parametrize("name", SHIPPED)
def test_packaged_copies_are_byte_identical(name: str) -> None:
    assert (ROOT / "policies" / name).read_bytes() == (ROOT / "proxy" / "default_policies" / name).read_bytes()


def test_default_policy_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    packaged = default_policy_path()
    assert packaged == ROOT / "proxy" / "default_policies" / "strict.yaml"
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "strict.yaml").write_text("name: local\n")
    assert default_policy_path() == tmp_path / "policies" / "strict.yaml"


def _refused(tmp_path: Path, text: str) -> PolicyError:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    assert info.value.file == str(path)
    return info.value


def test_wrong_type_nested_key(tmp_path: Path) -> None:
    error = _refused(tmp_path, "name: t\nbash:\n  scripts:\n    search:\n      flags: x\n")
    assert (error.line, error.key) == (5, "bash.scripts.search.flags")
    assert error.message == "expected a list of strings (got 'x')"
    assert str(error) == f"{tmp_path / 'p.yaml'}:5: bash.scripts.search.flags: expected a list of strings (got 'x')"


def test_unknown_key(tmp_path: Path) -> None:
    error = _refused(tmp_path, "name: t\nbash:\n  tools: [bash]\n  scripts_dri: x\n")
    assert (error.line, error.key) == (4, "bash.scripts_dri")
    assert "unknown key" in error.message and "scripts_dir" in error.message


def test_yaml_syntax_error(tmp_path: Path) -> None:
    error = _refused(tmp_path, "name: t\nbash: {tools: [bash\nmode: enforce\n")
    assert error.line is not None and error.line >= 2
    assert "YAML" in error.message


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("name: t\nmode: strict\n", 2, "mode"),
        ("mode: enforce\n", 1, "name"),
        ("name: t\nname: u\n", 2, "name"),
        ("name: t\nbash:\n  scripts:\n    search-v2: {}\n", 4, "bash.scripts.search-v2"),
        ("name: t\nbash:\n  scripts:\n    s: {flags: [ok]}\n", 4, "bash.scripts.s.flags[0]"),
        ("name: t\nbash: {scripts_dir: ../x}\n", 2, "bash.scripts_dir"),
        ("name: t\nretry_budget: yes\n", 2, "retry_budget"),
        ("name: t\nexamples:\n  allow:\n    - {tool: read}\n    - {tol: read}\n", 5, "examples.allow[1]"),
        ("- a\n", 1, None),
        ("", 1, None),
    ],
)
def test_errors_name_line_and_key(tmp_path: Path, text: str, line: int, key: str | None) -> None:
    error = _refused(tmp_path, text)
    assert (error.line, error.key) == (line, key), str(error)


def test_misjudged_example_is_refused(tmp_path: Path) -> None:
    text = (
        "name: t\nbash:\n  scripts:\n    search: {}\nexamples:\n  allow:\n"
        "    - uv run scripts/search.py\n    - uv run scripts/search.py | head -5\n"
    )
    error = _refused(tmp_path, text)
    assert (error.line, error.key) == (8, "examples.allow[1]")
    assert "uv run scripts/search.py | head -5" in error.message and "reject" in error.message


def test_misjudged_tool_example_is_refused(tmp_path: Path) -> None:
    text = "name: t\nexamples:\n  reject:\n    - {tool: read, arguments: {filePath: src/ok.py}}\n"
    error = _refused(tmp_path, text)
    assert (error.line, error.key) == (4, "examples.reject[0]")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy_file(tmp_path / "missing.yaml")
    assert "cannot read" in str(info.value)


def test_hash_follows_bytes(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: t\n")
    first = load_policy_file(path).hash
    path.write_text("name: t\n# comment\n")
    assert load_policy_file(path).hash != first


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    import time

    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join(['*a' + str(i - 1)] * 10)}]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("name: t\n" + "\n".join(levels) + "\n")
    start = time.perf_counter()
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    assert time.perf_counter() - start < 1
    assert "expands to more than" in info.value.message  # refused before anything is expanded


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    error = _refused(tmp_path, "name: t\n" + "#" * (1 << 20) + "\n")
    assert "larger than" in error.message
