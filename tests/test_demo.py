"""`allowlist-proxy demo` prints the stats table, with loops for the looping model."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

from tests.conftest import ROOT


def test_demo_prints_the_table_with_loops_for_the_looping_model():
    result = subprocess.run([sys.executable, "-m", "proxy", "demo", "--port", "0", "--exit", "--sessions", "2",
                             "--duration", "0"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Model" in out and "Err/tool" in out
    dense = re.search(r"^qwen3\.5-27b\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", out, re.M)
    assert dense and dense.group(1) == "2"
    loops = re.search(r"^qwen3\.6-35b-a3b\s*\|\s*(\d+)\s*\|", out.split("Loops", 1)[1], re.M)
    assert loops and int(loops.group(1)) == 2  # one loop of three `| head`/`| tail` variants per session
    assert "/dashboard" in out


def test_demo_moves_to_a_free_port_when_its_port_is_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "proxy", "demo", "--port", str(port), "--exit", "--sessions",
                                 "1", "--duration", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"port {port} is taken" in result.stderr and "Traceback" not in result.stderr
    assert f":{port}/" not in result.stdout and "/dashboard" in result.stdout
