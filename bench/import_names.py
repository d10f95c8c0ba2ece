"""What computing a project's importable names costs: the environment `uv run` uses, read cold and warm.

    python bench/import_names.py [PROJECT_ROOT ...]   (default: this checkout)

For each project: its interpreter and import directories (proxy/policy/paths/environment.py), then the names
its environment could import (proxy/policy/paths/importable.py: the installed distributions' and the standard
library's source read as text in a child process) - how many names, distributions, files and bytes, the cold
time (child process included) and the warm time (the kept answer), and one judged write against them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.policy import judge_call, load_policy_file  # noqa: E402
from proxy.policy.paths import importable  # noqa: E402
from proxy.policy.paths.environment import environment_of  # noqa: E402


def main() -> int:
    roots = [Path(a).resolve() for a in sys.argv[1:]] or [ROOT]
    policy = load_policy_file(ROOT / "policies" / "strict.yaml").policy
    for root in roots:
        env = environment_of(str(root), "scripts")
        print(f"{root}: python {env.version}, venv {env.venv}, import dirs {list(env.import_dirs)}")
        if not env.readable:
            print("  no environment to read: new top-level modules are refused unless named")
            continue
        start = time.perf_counter()
        found = importable.importable_names(env, wait=600)
        cold = time.perf_counter() - start
        if found is None:
            print("  the environment could not be read")
            continue
        start = time.perf_counter()
        for _ in range(1000):
            importable.importable_names(env)
        warm = (time.perf_counter() - start) / 1000
        print(f"  names {len(found.names)} (standard library {len(found.stdlib)}), distributions "
              f"{found.distributions}, files read {found.files}, {found.bytes / 1e6:.1f} MB")
        print(f"  cold {cold:.2f} s (the scan itself {found.seconds:.2f} s in the child), warm {warm * 1e6:.1f} us")
        rooted = policy.model_copy(update={"paths": policy.paths.model_copy(update={"project_root": [str(root)]})})
        start = time.perf_counter()
        verdict = judge_call(rooted, "write", {"filePath": "src/chardet.py", "content": "x"})
        print(f"  write src/chardet.py: {verdict.decision} {verdict.reasons} "
              f"({(time.perf_counter() - start) * 1e6:.0f} us, first judged write)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
