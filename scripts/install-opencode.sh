#!/usr/bin/env bash
# Installs the OpenCode CLI that tests/e2e drives, outside the repository, with the machine's npm.
#   OPENCODE_VERSION  the release (default: the one the suite was written against)
#   OPENCODE_CACHE    where it goes (default: ~/.cache/allowlist-proxy-e2e); kept between runs
# Exits 0 with a message when npm is missing or the install fails, so the suite skips with a
# reason instead (set E2E_REQUIRE_OPENCODE=1 for pytest to fail then).
set -uo pipefail

version="${OPENCODE_VERSION:-1.18.33}"
cache="${OPENCODE_CACHE:-$HOME/.cache/allowlist-proxy-e2e}"
bin="$cache/node_modules/.bin/opencode"

# Even `opencode --version` writes state under HOME and the XDG directories: give it a scratch one.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
installed() {
  [ -x "$bin" ] && [ "$(HOME="$scratch" XDG_CONFIG_HOME="$scratch/c" XDG_DATA_HOME="$scratch/d" \
    XDG_CACHE_HOME="$scratch/k" XDG_STATE_HOME="$scratch/s" "$bin" --version 2>/dev/null)" = "$version" ]
}

if installed; then
  echo "opencode $version already in $cache"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "npm not found: the OpenCode end-to-end tests will be skipped" >&2
  exit 0
fi
mkdir -p "$cache"
# opencode-ai pulls its platform binary (opencode-linux-x64, ...) as an optional dependency.
if ! npm install --prefix "$cache" --no-audit --no-fund --loglevel=error "opencode-ai@$version" >&2; then
  echo "npm install opencode-ai@$version failed: the OpenCode end-to-end tests will be skipped" >&2
  exit 0
fi
# Its postinstall links the platform binary in place of bin/opencode.exe; npm versions that do
# not run install scripts leave a stub, so link it here the same way.
if ! installed; then
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64|arm64) arch=arm64 ;; *) arch="$(uname -m)" ;; esac
  for pkg in "opencode-linux-$arch" "opencode-linux-$arch-baseline"; do
    platform="$cache/node_modules/$pkg/bin/opencode"
    if [ -x "$platform" ] && HOME="$scratch" "$platform" --version >/dev/null 2>&1; then
      ln -f "$platform" "$cache/node_modules/opencode-ai/bin/opencode.exe" 2>/dev/null \
        || cp -f "$platform" "$cache/node_modules/opencode-ai/bin/opencode.exe"
      break
    fi
  done
fi
if installed; then
  echo "opencode $version installed in $cache"
else
  echo "opencode $version did not install in $cache: the end-to-end tests will be skipped" >&2
fi
