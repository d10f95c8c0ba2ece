"""SQLAlchemy's asyncio engine without its ORM.

`sqlalchemy.ext.asyncio`'s package module imports its ORM session classes, and with them `sqlalchemy.orm`:
7 MB of a serving proxy's ~90, for classes the proxy never uses (the store is SQLAlchemy Core). `light()`
registers that package without running its module, so that its engine and result modules load as usual;
any other name asked of the package (an ORM session, wanted by a test or a tool) runs the package module in
full then, so everything the package offers still works, only later.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

__all__ = ["light"]

_PACKAGE = "sqlalchemy.ext.asyncio"
_CORE = ("engine", "result", "exc")


def light() -> None:
    """Idempotent; does nothing once the package has been imported in full (or lightly) already."""
    if _PACKAGE in sys.modules:
        return
    import sqlalchemy.ext  # the parent, a plain namespace of extensions

    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.loader is None:
        return
    package = importlib.util.module_from_spec(spec)

    def full(name: str) -> Any:
        for part in _CORE:
            core = sys.modules.get(f"{_PACKAGE}.{part}")
            if core is not None and not name.startswith("_") and name in getattr(core, "__all__", vars(core)):
                return getattr(core, name)
        if importlib.util.find_spec(f"{_PACKAGE}.{name}") is not None:
            raise AttributeError(name)  # a submodule not imported yet: the import system imports it
        del package.__dict__["__getattr__"]  # from here on the package is the library's own, run once
        spec.loader.exec_module(package)  # type: ignore[union-attr]
        return getattr(package, name)

    package.__dict__["__getattr__"] = full
    sys.modules[_PACKAGE] = package
    vars(sqlalchemy.ext)["asyncio"] = package  # as the import system binds a loaded submodule
    for part in _CORE:
        importlib.import_module(f"{_PACKAGE}.{part}")
