"""`allowlist-proxy demo`: the proxy in front of a built-in scripted upstream, a few agent sessions
driven through it, then the statistics — a first look with no GPU."""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proxy.cli.command import HelpFormatter

__all__ = ["register"]


def register(sub: Any) -> None:
    parser = sub.add_parser("demo", help="run the proxy against a built-in scripted model and show the stats",
                            description="Start the proxy in front of a scripted upstream that replays a "
                                        "switching (dense-like) and a looping (MoE-like) model, drive streamed "
                                        "sessions through it, and print the statistics.",
                            epilog="examples:\n  allowlist-proxy demo                 then open the dashboard URL it "
                                   "prints\n  allowlist-proxy demo --exit --duration 0 --port 0\n",
                            formatter_class=HelpFormatter)
    parser.add_argument("--port", type=int, default=8080,
                        help="proxy port (default 8080, or a free one when 8080 is taken; 0 picks a free one)")
    parser.add_argument("--sessions", type=int, default=3, help="parallel sessions per model (default 3)")
    parser.add_argument("--duration", type=float, default=25.0,
                        help="seconds to keep starting sessions, so the throughput windows fill (default 25; "
                             "0 runs one round)")
    parser.add_argument("--db", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--exit", action="store_true", help="stop after printing instead of serving on")
    parser.set_defaults(func=run)


def _server_on(app: Any, port: int) -> Any:
    """A server on `port`, or on a free one (said on stderr) when `port` is taken, e.g. by `serve`."""
    from proxy.testing.server import ServerThread

    try:
        return ServerThread(app, port=port or None)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        server = ServerThread(app)
        print(f"port {port} is taken (is `allowlist-proxy serve` running?); the demo uses {server.port} instead",
              file=sys.stderr)
        return server


def run(args: argparse.Namespace) -> int:
    from proxy.config import Settings
    from proxy.http.app import create_app
    from proxy.stats.models import loops_table, model_stats, reasons_table, seed_table
    from proxy.testing.demo_traffic import demo_upstream, drive_sessions
    from proxy.testing.server import ServerThread

    with tempfile.TemporaryDirectory(prefix="allowlist-demo-") as tmp:
        upstream = demo_upstream()
        with ServerThread(upstream.app) as upstream_server:
            upstream.url = upstream_server.url + "/v1"
            db = args.db or f"sqlite:///{Path(tmp) / 'demo.db'}"
            # The demo's refusals are its point, shown in its tables: its log says only what went wrong
            # (`error`), unless ALLOWLIST_PROXY_LOG_LEVEL asks for more.
            settings = Settings.of(upstream=upstream.url, upstreams=[], db=db, port=args.port)
            if not os.environ.get("ALLOWLIST_PROXY_LOG_LEVEL"):
                settings.telemetry.log_level = "error"
            app = create_app(settings)
            with _server_on(app, args.port) as proxy_server:
                print(f"proxy on {proxy_server.url}/v1 in front of a scripted upstream; {args.sessions} "
                      f"streamed sessions per model for {args.duration:g} s...", flush=True)
                asyncio.run(drive_sessions(proxy_server.url, args.sessions, duration=args.duration))
                state = app.state.proxy
                asyncio.run_coroutine_threadsafe(state.writer.flush(10), app.state.loop).result(15)
                loop_min = state.policies.current().policy.loop_min_attempts
                stats = asyncio.run_coroutine_threadsafe(
                    model_stats(state.engine, loop_min_attempts=loop_min), app.state.loop).result(30)
                print()
                print(seed_table(stats))
                print()
                print(reasons_table(stats))
                print()
                print(loops_table(stats))
                print()
                if args.duration > 0:
                    from proxy.throughput.live import render_live_tables

                    print(render_live_tables({m["model"]: m["throughput"] for m in stats["models"]}))
                print(f"dashboard: {proxy_server.url}/dashboard   stats: {proxy_server.url}/stats/models")
                if args.exit:
                    return 0
                print("serving; Ctrl-C to stop")
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    return 0
