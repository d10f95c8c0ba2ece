#!/usr/bin/env bash
# Unpacks the released packages of the agent clients the end-to-end suite does not run - Gemini CLI and aider -
# so tests/policy/test_client_files.py can read which files each release loads.
#   CLIENT_RELEASES_CACHE  where they go (default: ~/.cache/allowlist-proxy-client-releases); kept between runs
# Exits 0 with a message when npm or pip is missing or a download fails, so that test skips with a reason
# instead (set E2E_REQUIRE_CLIENTS=1 for pytest to fail then).
set -uo pipefail

cache="${CLIENT_RELEASES_CACHE:-$HOME/.cache/allowlist-proxy-client-releases}"
# The releases the profiles' `files` were read from (proxy/default_policies/tool-profiles.yaml).
npm_packages=("@google/gemini-cli@0.61.0")
pypi_packages=("aider-chat==0.86.2")
mkdir -p "$cache"

for spec in "${npm_packages[@]}"; do
  name="${spec%@*}" version="${spec##*@}"
  target="$cache/$(echo "$name" | tr -d '@' | tr '/' '-')-$version"
  if [ -d "$target/package" ]; then echo "$spec already in $cache"; continue; fi
  if ! command -v npm >/dev/null 2>&1; then echo "npm not found: $spec is not unpacked" >&2; continue; fi
  tarball=$(cd "$cache" && npm pack --silent "$spec" 2>/dev/null | tail -1)
  if [ -z "$tarball" ] || [ ! -f "$cache/$tarball" ]; then echo "npm pack $spec failed" >&2; continue; fi
  mkdir -p "$target" && tar xzf "$cache/$tarball" -C "$target" && rm -f "$cache/$tarball" && echo "$spec in $target"
done

for spec in "${pypi_packages[@]}"; do
  name="${spec%==*}" version="${spec##*==}"
  target="$cache/$name-$version"
  if [ -d "$target" ]; then echo "$spec already in $cache"; continue; fi
  download="$cache/download-$name"
  mkdir -p "$download"
  if ! python3 -m pip download -q --no-deps -d "$download" "$spec" >&2; then
    echo "pip download $spec failed" >&2; rm -rf "$download"; continue
  fi
  mkdir -p "$target" && python3 -m zipfile -e "$download"/*.whl "$target" && rm -rf "$download" && echo "$spec in $target"
done
exit 0
