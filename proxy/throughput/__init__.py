"""Throughput by concurrency: the seed's per-window tables, from vLLM logs now and live windows later.

`tables` holds the one definition of every cell and its rendering; `vllm_log` reads one log line;
`log_import` turns whole logs into windows per model.
"""

# The package's names are its modules' public names, each listed once, in the module's `__all__`.
from proxy.throughput import log_import, tables
from proxy.throughput.log_import import *  # noqa: F403
from proxy.throughput.tables import *  # noqa: F403

__all__ = [*log_import.__all__, *tables.__all__]
