#!/usr/bin/env bash
# Install what is missing, build, and start the gateway (extra args go to proxai).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-npm
exec build/proxai "$@"
