#!/bin/sh
# bench/run.sh [--quick] [bench.py options]: build proxai and the bench tools
# in release mode, then measure proxai, nginx and the mock called directly in
# one run. Results go to bench/results/. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BENCH_BUILD:-build-bench}
if [ ! -d "$BUILD" ]; then
  meson setup "$BUILD" --buildtype=release >/dev/null
fi
ninja -C "$BUILD" proxai bench/fastmock bench/streamclient >/dev/null
exec python3 bench/bench.py --build "$BUILD" "$@"
