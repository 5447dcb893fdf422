#!/usr/bin/env bash
# The unit tests (common, topologies, kernels, gossip, trainer) of the
# ASan + UBSan build (./build-fuzz, built by scripts/fuzz.sh with them as
# EXTRA_TARGETS), CTEST_JOBS at a time (default two a CPU). When every one
# passes it writes build-fuzz/unit-tests.passed: the test binaries' sizes
# and times, as `scripts/sanitizer_tests.sh --passed` prints them now. That
# command exits 0 only while the mark matches, so that a caller can tell a
# finished pass of these very binaries from one that was stopped, failed or
# ran binaries rebuilt since.
#   scripts/sanitizer_tests.sh [CTEST ARGS...]
#   scripts/sanitizer_tests.sh --passed
set -euo pipefail
cd "$(dirname "$0")/.."
marker=build-fuzz/unit-tests.passed
stamp() { stat -c '%s %Y %n' build-fuzz/tests/chorus_*_tests 2>/dev/null; }
if [ "${1:-}" = --passed ]; then
  [ -f "$marker" ] && [ -n "$(stamp)" ] && [ "$(stamp)" = "$(cat "$marker")" ]
  exit
fi
rm -f "$marker"
before=$(stamp)
source scripts/sanitizer_env.sh
jobs=${CTEST_JOBS:-$((2 * $(nproc 2>/dev/null || echo 2)))}
(cd build-fuzz && ctest --output-on-failure -j"$jobs" --timeout 900 \
   -L 'common|topologies|kernels|gossip|trainer' "$@")
[ "$(stamp)" = "$before" ] && echo "$before" >"$marker"
