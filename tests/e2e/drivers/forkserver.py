"""Runs agent drivers as processes forked from this one, which imported each driver (and so its SDK) once.

Started by tests/e2e/preloaded.py with the python of an agent's own venv:
    python forkserver.py DRIVER.py [DRIVER.py ...]
It runs each driver's top level (its imports; `main` runs only under `__main__`), prints `{"ready": true}`, then
reads one JSON request a line on stdin: {"id", "argv", "cwd", "env", "stdout", "stderr"}. Each is a fork that runs
`argv[0]` as `__main__` with `argv` as sys.argv, in `cwd`, with exactly `env`, its output into the two files; the
fork is a process of its own (its pid answered as {"id", "pid"}), its exit answered as {"pid", "exit"}.

One thread only: a fork copies no other thread's half-held lock.
"""

import json
import os
import runpy
import select
import sys
import traceback


def _run(request: dict) -> int:
    """In the fork: the driver as `python DRIVER ARGS...` would run it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if not isinstance(done.code, int | None):
            print(done.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _say(message: dict) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def main() -> None:
    drivers = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(drivers[0]))
    for driver in drivers:
        runpy.run_path(driver, run_name="__preload__")
    sys.stdout.flush()
    _say({"ready": True})
    pending = b""
    open_input = True
    children: set[int] = set()
    while open_input or children:
        readable, _, _ = select.select([0] if open_input else [], [], [], 0.01)
        if readable:
            chunk = os.read(0, 65536)
            if not chunk:
                open_input = False
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        code = _run(request)
                    finally:
                        os._exit(code & 0xFF)
                children.add(pid)
                _say({"id": request["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            _say({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
