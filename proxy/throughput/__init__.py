"""Throughput by concurrency: the seed's per-window tables, from vLLM logs now and live windows later.

`tables` holds the one definition of every cell and its rendering; `vllm_log` reads one log line;
`log_import` turns whole logs into windows per model.
"""

from proxy.throughput.log_import import ImportResult, LineCounts, LogImport
from proxy.throughput.tables import (
    DEFAULT_WINDOW_SECONDS,
    Cell,
    ModelTable,
    SpecDecode,
    SpecDecodeBuilder,
    TableBuilder,
    Window,
    build_table,
    concurrency_levels,
    format_value,
    render_markdown,
    render_text,
    tables_to_json,
)

__all__ = [
    "DEFAULT_WINDOW_SECONDS",
    "Cell",
    "ImportResult",
    "LineCounts",
    "LogImport",
    "ModelTable",
    "SpecDecode",
    "SpecDecodeBuilder",
    "TableBuilder",
    "Window",
    "build_table",
    "concurrency_levels",
    "format_value",
    "render_markdown",
    "render_text",
    "tables_to_json",
]
