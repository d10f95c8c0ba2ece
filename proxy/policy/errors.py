"""The one error of the policy package: a policy file that cannot be served, and where it is wrong."""

from __future__ import annotations

from typing import Any

__all__ = ["PolicyError"]


class PolicyError(Exception):
    """A refused policy file: `str()` reads like `policies/strict.yaml:12: bash.scripts.search.flags: ...`.

    `details` holds every problem found (dicts of file, line, key, message), the first being this one.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
        details: tuple[dict[str, Any], ...] = (),
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        self.details = details or ({"file": file, "line": line, "key": key, "message": message},)
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        key = f"{self.key}: " if self.key else ""
        more = f" (and {len(self.details) - 1} more)" if len(self.details) > 1 else ""
        return f"{where}{key}{self.message}{more}"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "key": self.key, "message": self.message}
