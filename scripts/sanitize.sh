#!/usr/bin/env bash
# A checking build: builds Chorus with AddressSanitizer and UndefinedBehaviorSanitizer
# in ./build-asan (CUDA off, no benchmarks) and runs the whole test suite there.
# The whole suite this way takes twice the Release suite's time on 2 cores, so
# CI (scripts/test.sh) runs only the unit tests, and in the fuzzers' clang
# build (scripts/fuzz.sh) rather than here; run this whole after a change to
# the transport, the control plane or the collectives.
# Arguments go to ctest (e.g. -L gossip, -R Fabric). TARGETS (space-separated
# test targets, e.g. "chorus_gossip_tests chorus_common_tests") builds only
# those.
# SANITIZE=thread builds ./build-tsan with ThreadSanitizer instead (see below).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
sanitize=${SANITIZE:-address,undefined}
dir=build-asan
[ "$sanitize" = thread ] && dir=build-tsan
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_SANITIZE="$sanitize" \
  -DCHORUS_CUDA=OFF -DCHORUS_BUILD_BENCH=OFF >/dev/null
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j"$jobs" "${targets[@]}"
source scripts/sanitizer_env.sh
# die_after_fork=0: the shm tests fork a peer process that opens an endpoint
# (a progress thread), which TSan refuses after a multi-threaded fork unless
# told not to; the child then runs unchecked. scripts/tsan.supp lists the
# reports TSan cannot judge (a killed process's lock released by another).
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:suppressions=$PWD/scripts/tsan.supp}
cd "$dir"
if [ "$sanitize" = thread ]; then
  # libgomp is not built with ThreadSanitizer, so it cannot see the barrier
  # that ends an OpenMP region: every multi-threaded kernel would be reported.
  # One OpenMP / OpenBLAS thread, and without the kernel tests that ask for
  # several (*Threads.*); the control plane, transport and exchange threads
  # are what this run checks.
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  exec ctest --output-on-failure -j"$jobs" --timeout 900 -E 'Threads\.' "$@"
fi
ctest --output-on-failure -j"$jobs" --timeout 900 "$@"
