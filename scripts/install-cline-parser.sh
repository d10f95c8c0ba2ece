#!/usr/bin/env bash
# Fetches the `cline` release whose XML tool parser (parseAssistantMessageV2, bundled in dist/lib.mjs) the proxy's
# reader of Cline-style action tags is checked against (tests/toolcalls/test_cline_parser.py), outside the
# repository, pinned, with the machine's npm. Only the package's own files are needed (the test runs the parser
# alone under node), so it is unpacked, not installed with its dependencies.
#   CLINE_PARSER_CACHE  where it goes (default: ~/.cache/allowlist-proxy-cline-parser); kept between runs
# Exits 0 with a message when npm is missing or the fetch fails, so the test skips with a reason instead
# (set E2E_REQUIRE_CLIENTS=1 for pytest to fail then).
set -uo pipefail

cache="${CLINE_PARSER_CACHE:-$HOME/.cache/allowlist-proxy-cline-parser}"
version="2.18.0"  # the last release whose model protocol is the XML tags (3.x calls tools natively)
if [ -f "$cache/$version/package/dist/lib.mjs" ]; then
  echo "cline@$version's parser already in $cache"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: the Cline parser test will be skipped" >&2
  exit 0
fi
mkdir -p "$cache/$version"
if ! (cd "$cache/$version" && npm pack --silent "cline@$version" >/dev/null && tar xzf "cline-$version.tgz"); then
  echo "npm pack cline@$version failed: the Cline parser test will be skipped" >&2
  exit 0
fi
echo "cline@$version's parser in $cache"
