#!/usr/bin/env bash
# Install what is missing (Debian 12 packages, npm test dependencies) and build.
# Usage: scripts/setup.sh [--no-npm]
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(meson ninja-build pkg-config gcc libuv1-dev libcurl4-openssl-dev libjansson-dev
      libssl-dev libinih-dev node-llhttp nodejs npm curl libhiredis-dev redis-server nginx)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs/npm may come from elsewhere (nvm, NodeSource): accept commands on PATH
if command -v node >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}")
fi
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]:-}"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${1:-}" != "--no-npm" ] && [ -f test/package-lock.json ]; then
  if [ ! -d test/node_modules ] || [ test/package-lock.json -nt test/node_modules/.package-lock.json ]; then
    echo "setup: npm ci in test/" >&2
    (cd test && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi

# The real coding agents (Claude Code, Codex) for the 'agents' test suite.
if [ "${1:-}" != "--no-npm" ] && [ -f test/agents/package-lock.json ]; then
  if [ ! -d test/agents/node_modules ] || [ test/agents/package-lock.json -nt test/agents/node_modules/.package-lock.json ]; then
    echo "setup: npm ci in test/agents/" >&2
    (cd test/agents && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi

[ -d build ] || meson setup build --buildtype=release >/dev/null
ninja -C build >/dev/null
echo "setup: built build/proxai" >&2
