#!/usr/bin/env bash
# Run the whole test suite: unit, fixtures, fuzz replay and integration tests
# on the normal build, then the same suites on an address/undefined/leak
# sanitizer build. Ends with one line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
tally() { # $1 = meson test log
  local ok fail to
  ok=$(grep -E '^Ok:' "$1" | awk '{print $2}' | tail -1)
  fail=$(grep -E '^Fail:' "$1" | awk '{print $2}' | tail -1)
  to=$(grep -E '^Timeout:' "$1" | awk '{print $2}' | tail -1)
  xp=$(grep -E '^Unexpected Pass:' "$1" | awk '{print $3}' | tail -1)
  passed=$((passed + ${ok:-0}))
  failed=$((failed + ${fail:-0} + ${to:-0} + ${xp:-0}))
}

log=$(mktemp)
echo "== tests (release build)"
meson test -C build --print-errorlogs --num-processes 2 ${PROXAI_TEST_ARGS:-} 2>&1 | tee "$log"
tally "$log"

if [ "${PROXAI_NO_SANITIZE:-0}" != 1 ]; then
  echo "== tests (sanitizer build: address, undefined, leak)"
  if [ ! -d build-asan ]; then
    meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
      --buildtype=debug >/dev/null
  fi
  if ninja -C build-asan >/dev/null; then
    PROXAI_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:quarantine_size_mb=8 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      meson test -C build-asan --print-errorlogs --num-processes 2 \
      --no-suite agents ${PROXAI_TEST_ARGS:-} 2>&1 | tee "$log"
    tally "$log"
  else
    echo "sanitizer build failed"
    failed=$((failed + 1))
  fi
fi
rm -f "$log"
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
