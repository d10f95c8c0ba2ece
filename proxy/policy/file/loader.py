"""Reading a policy file: YAML with line numbers, schema validation, and the self-test of its examples.

Every refusal is one `PolicyError` naming the file, the line and the dotted key, with a message that says
what was expected and what arrived, e.g.
`policies/strict.yaml:12: bash.scripts.search.flags: expected a list of strings (got 'x')`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ValidationError

from ..errors import PolicyError
from ..judge import judge_call, judge_command
from ..schema import Policy, ToolExample

__all__ = ["LoadedPolicy", "default_policy_path", "load_policy_file", "load_policy_text", "policy_document"]

# A policy is a page of YAML; anything far bigger is a mistake (or an attack on the reload loop).
MAX_POLICY_BYTES = 1 << 20
_PACKAGED = Path(__file__).resolve().parents[2] / "default_policies" / "strict.yaml"


@dataclass(kw_only=True, frozen=True)
class LoadedPolicy:
    policy: Policy
    name: str
    path: Path | None
    hash: str  # sha256 of the file's bytes (first 16 hex digits), stored with every verdict
    # The top-level keys the file writes out, and whether it ends with YAML's document end marker `...`: what
    # a reload is checked against, so that a file cut short never becomes the policy (proxy.policy.file.reload_guard).
    sections: frozenset[str] = frozenset()
    complete: bool = False
    # The file's text as loaded: what `serve --workers N` hands its workers, so that all serve this version even
    # once the file holds another (a held widening edit; proxy/policy/file/shared.py).
    text: str = dataclasses.field(default="", repr=False, compare=False)

    @property
    def mode(self) -> str:
        return self.policy.mode


def default_policy_path() -> Path:
    """`policies/strict.yaml` under the working directory if there is one, else the packaged copy."""
    local = Path.cwd() / "policies" / "strict.yaml"
    return local if local.is_file() else _PACKAGED


# -- YAML with lines ------------------------------------------------------------------------------------

Key = tuple[str | int, ...]


def _key_text(path: Key) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _index_lines(node: yaml.Node, path: Key, lines: dict[Key, int], file: str, seen_nodes: set[int]) -> None:
    """Record the 1-based line of every key and list item; refuse duplicate keys (YAML keeps the last).

    A node reached again through an alias is not walked twice: nested aliases would otherwise make the
    walk exponential (a "billion laughs" file).
    """
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*path, key)
            if key in seen:
                raise PolicyError(
                    "duplicate key (YAML would silently keep the last one)",
                    file=file, line=key_node.start_mark.line + 1, key=_key_text(child),
                )  # fmt: skip
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _index_lines(value_node, child, lines, file, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines[child] = item.start_mark.line + 1
            _index_lines(item, child, lines, file, seen_nodes)


# libyaml when present: the same grammar, 25 times faster (it matters when a file is reloaded mid-write).
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A page of policy is a few hundred nodes; aliases may repeat a node, but not into an expansion bomb.
MAX_EXPANDED_NODES = 20_000


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes the document has once every alias is expanded (each node's size computed once)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = MAX_EXPANDED_NODES + 1  # a cycle counts as too big
    total = 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            total += _expanded_size(key_node, sizes) + _expanded_size(value_node, sizes)
            if total > MAX_EXPANDED_NODES:
                break
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            total += _expanded_size(item, sizes)
            if total > MAX_EXPANDED_NODES:
                break
    sizes[id(node)] = total
    return total


def _yaml_error(exc: yaml.YAMLError, file: str) -> PolicyError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        return PolicyError(f"YAML syntax error: {problem}", file=file, line=mark.line + 1 if mark else None)
    return PolicyError(f"YAML error: {exc}", file=file)


def _parse_yaml(text: str, file: str) -> tuple[Any, dict[Key, int]]:
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is not None and _expanded_size(node, {}) > MAX_EXPANDED_NODES:
                raise PolicyError(f"the YAML expands to more than {MAX_EXPANDED_NODES} values (aliases repeating "
                                  "aliases): refused", file=file, line=1)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, file) from None
    lines: dict[Key, int] = {}
    if node is not None:
        _index_lines(node, (), lines, file, set())
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise PolicyError(f"expected a mapping of policy keys at the top of the file (got {got})", file=file, line=1)
    return data, lines


# -- validation messages --------------------------------------------------------------------------------


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated[...] and Optional[...] down to the type the operator has to write."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return annotation


def _describe(annotation: Any, plural: bool = False) -> str:
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if annotation is str:
        return "strings" if plural else "a string"
    if annotation is int:
        return "integers" if plural else "an integer"
    if annotation is bool:
        return "booleans" if plural else "true or false"
    if origin is list:
        return ("lists of " if plural else "a list of ") + _describe(typing.get_args(annotation)[0], True)
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "mappings" if plural else "a mapping"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a, plural) for a in typing.get_args(annotation) if a is not type(None))
    return "values" if plural else "a value"


def _field(model: type[BaseModel], key: str) -> Any:
    """The model's field a file key names: its own name or one of its aliases (`shell:` for `bash`)."""
    found = model.model_fields.get(key)
    if found is not None:
        return found
    for field in model.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices) and key in alias.choices:
            return field
    return None


def _annotation_at(path: Key) -> tuple[Any, type[BaseModel] | None]:
    """The annotation the schema gives a key path, and the model owning its last key (or None)."""
    annotation: Any = Policy
    owner: type[BaseModel] | None = None
    for part in path:
        annotation = _unwrap(annotation)
        origin = typing.get_origin(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = _field(annotation, str(part))
            if field is None:
                return None, annotation
            owner, annotation = annotation, field.annotation
        elif origin is dict:
            owner, annotation = None, typing.get_args(annotation)[1]
        elif origin is list:
            owner, annotation = None, typing.get_args(annotation)[0]
        else:
            return None, None
    return annotation, owner


def _data_path(data: Any, loc: tuple[Any, ...]) -> Key:
    """The part of a pydantic error location that names real keys (drops union tags like 'str')."""
    path: list[str | int] = []
    for part in loc:
        if (isinstance(data, dict) and part in data) or (
            isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        ):
            data = data[part]
            path.append(part)
    return tuple(path)


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(error: Any, path: Key, loc: tuple[Any, ...]) -> str:
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        _, owner = _annotation_at(path)
        if owner is None:  # the parent is the model: look the last key up one level
            parent, _ = _annotation_at(path[:-1])
            owner = _unwrap(parent) if isinstance(_unwrap(parent), type) else None
        allowed = ", ".join(owner.model_fields) if owner else ""
        return f"unknown key (allowed here: {allowed})" if allowed else "unknown key"
    if kind == "missing":
        return "required key is missing"
    if "[key]" in loc:
        if kind == "string_pattern_mismatch":
            return f"expected an identifier (letters, digits and _, not starting with a digit) (got {_got(value)})"
        return f"invalid key (got {_got(value)})"
    if kind == "string_pattern_mismatch":
        pattern = str(error.get("ctx", {}).get("pattern", ""))
        if pattern.startswith("^-"):
            return f"expected a flag such as --max-results (got {_got(value)})"
        return f"expected a string matching {pattern} (got {_got(value)})"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than", "string_too_short",
                "string_too_long", "literal_error"):  # fmt: skip
        return f"{error['msg'][0].lower()}{error['msg'][1:]} (got {_got(value)})"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    annotation, _ = _annotation_at(path)
    if annotation is not None and kind.endswith(("_type", "_parsing")):
        return f"expected {_describe(annotation)} (got {_got(value)})"
    return f"{error['msg']} (got {_got(value)})"


def _line_for(path: Key, lines: dict[Key, int]) -> int | None:
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None


def _validation_error(exc: ValidationError, data: Any, lines: dict[Key, int], file: str) -> PolicyError:
    details: list[dict[str, Any]] = []
    seen: set[Key] = set()
    for error in exc.errors():
        loc = tuple(error["loc"])
        path = _data_path(data, loc)
        if error["type"] in ("extra_forbidden", "missing") and loc and loc[-1] not in path:
            path = (*path, loc[-1])  # the unknown or missing key itself
        if path in seen:
            continue  # a union reports once per member; one message per key is enough
        seen.add(path)
        details.append(
            {"file": file, "line": _line_for(path, lines) or 1, "key": _key_text(path) or None,
             "message": _message(error, path, loc)}
        )  # fmt: skip
    first = details[0]
    return PolicyError(first["message"], file=file, line=first["line"], key=first["key"], details=tuple(details))


# -- self-test ------------------------------------------------------------------------------------------


def _self_test(policy: Policy, lines: dict[Key, int], file: str) -> None:
    """Judge the policy's own examples; the first misjudged one refuses the file."""
    for expected in ("allow", "reject"):
        for index, example in enumerate(getattr(policy.examples, expected)):
            if isinstance(example, ToolExample):
                verdict = judge_call(policy, example.tool, example.arguments)
                shown = f"{example.tool} {example.arguments!r}"
            else:
                verdict = judge_command(policy, example)
                shown = repr(example)
            if verdict.allowed != (expected == "allow"):
                path: Key = ("examples", expected, index)
                why = f" ({', '.join(verdict.reasons)})" if verdict.reasons else ""
                raise PolicyError(
                    f"example {shown} is judged {verdict.decision}{why}, but the policy lists it under {expected}",
                    file=file, line=_line_for(path, lines), key=_key_text(path),
                )  # fmt: skip


def _decode(text: str | bytes, file: str) -> tuple[bytes, str]:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(f"the file is larger than {MAX_POLICY_BYTES} bytes", file=file)
    try:
        return raw, raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=file) from None


def policy_document(text: str | bytes, *, file: str = "<policy>") -> str:
    """What a policy text says, read as YAML only (composed, not built into values, validated or self-tested): its
    node tree, each node's tag and text (a node met again through an alias by where it was first met), and whether
    it ends with `...`. Two texts with the same document load to the same policy and the same sections (only their
    hash differs), or fail alike; two that write a value differently (`10` and `0xa`) may differ and still load
    alike. Raises PolicyError where the YAML does not parse."""
    _, decoded = _decode(text, file)
    loader = _Loader(decoded)
    try:
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, file) from None
    finally:
        loader.dispose()
    return repr((None if node is None else _node_key(node, {}), _ends_with_end_marker(decoded)))


def _node_key(node: yaml.Node, met: dict[int, int]) -> Any:
    """A node tree as nested tuples, each node walked once (an alias is its first place: no expansion bomb)."""
    first = met.get(id(node))
    if first is not None:
        return first
    met[id(node)] = len(met)
    if isinstance(node, yaml.MappingNode):
        return node.tag, tuple((_node_key(key, met), _node_key(value, met)) for key, value in node.value)
    if isinstance(node, yaml.SequenceNode):
        return node.tag, tuple(_node_key(item, met) for item in node.value)
    return node.tag, node.value


def load_policy_text(text: str | bytes, *, file: str = "<policy>", path: Path | None = None) -> LoadedPolicy:
    raw, decoded = _decode(text, file)
    data, lines = _parse_yaml(decoded, file)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc, data, lines, file) from None
    _self_test(policy, lines, file)
    return LoadedPolicy(policy=policy, name=policy.name, path=path, hash=hashlib.sha256(raw).hexdigest()[:16],
                        sections=frozenset(str(k) for k in data), complete=_ends_with_end_marker(decoded),
                        text=decoded)


def _ends_with_end_marker(text: str) -> bool:
    lines = [line.rstrip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return bool(lines) and lines[-1] == "..."


def load_policy_file(path: Path | str) -> LoadedPolicy:
    """Read, validate and self-test one policy file; PolicyError names file, line and key."""
    path = Path(path)
    try:
        # Checked before reading, and never more read than the limit allows: a 1 GiB file costs nothing.
        size = path.stat().st_size
        if size > MAX_POLICY_BYTES:
            raise PolicyError(f"the file is larger than {MAX_POLICY_BYTES} bytes ({size})", file=str(path))
        with path.open("rb") as handle:
            raw = handle.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise PolicyError(f"cannot read the file: {exc.strerror or exc}", file=str(path)) from None
    return load_policy_text(raw, file=str(path), path=path)
