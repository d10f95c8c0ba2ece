"""The shell and the file reader the Python agent drivers give their agents, as plain functions whose signature and
(Google-style) docstring each framework reads the tool's schema from. A driver runs in the project (its cwd), so
that is where a command runs and a relative path is read."""

import subprocess
from pathlib import Path


def run_shell(command: str) -> str:
    """Runs a shell command in the project and returns its output.

    Args:
        command: the command line to run.
    """
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def read_text(path: str) -> str:
    """Reads a text file.

    Args:
        path: the file's path.
    """
    return Path(path).read_text()
