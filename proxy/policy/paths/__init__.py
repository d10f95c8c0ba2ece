"""File paths: inside the project or refused, protected writes and reads, and what a search would read.

`inside` (a path a tool would open: relative inside the root, absolute only under a root, patch headers),
`protected` (`protected:`: what no tool may write or read, matched after normalisation), `globs` (filter globs
read as the tools read them), `on_disk` (the files a directory search would reach), `imported` (the project
modules the allowed scripts import).
"""

from __future__ import annotations

from .inside import patch_paths, path_problem, path_value_problem
from .on_disk import searched_secret
from .protected import protected_for, protected_problem

__all__ = ["patch_paths", "path_problem", "path_value_problem", "protected_for", "protected_problem", "searched_secret"]
