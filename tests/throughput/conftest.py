"""Fixtures for the throughput tests; the generated logs themselves live in `vllm_log_fixtures`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from .vllm_log_fixtures import SeedWindow, render_log


@pytest.fixture
def write_log(tmp_path: Path) -> Callable[..., Path]:
    """write_log(name, windows, fmt, **render_log options) -> the file's path."""

    def write(name: str, windows: Sequence[SeedWindow], fmt: str = "v1_engine", **kw: object) -> Path:
        path = tmp_path / name
        path.write_bytes(render_log(windows, fmt, **kw).encode())  # type: ignore[arg-type]
        return path

    return write
