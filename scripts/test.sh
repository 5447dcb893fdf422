#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole test suite.
# Stages, each timed at the end: setup, build (./build, Release), the suite
# (ctest, then its 20 slowest tests), and one clang build with
# AddressSanitizer, UndefinedBehaviorSanitizer and the fuzzers' coverage
# (./build-fuzz) that runs the unit tests and then every fuzz target. That
# build compiles while the suite runs, one compiler at a time at the idle
# scheduling class (chrt --idle): it takes only cycles the suite leaves
# unused (its multi-process tests wait on each other and on timeouts much of
# the time), and goes on with every CPU once the suite is done. Once built,
# its unit tests run there too, still at the idle class; a pass there that
# the suite's end did not cut short counts, anything else (cut short,
# failed, not reached) runs them again after the suite. Its log:
# build-fuzz.log.
# Arguments go to the suite's ctest, and skip the last stage.
set -euo pipefail
cd "$(dirname "$0")/.."
stage_names=()
stage_seconds=()
stage_start=$SECONDS
stage_done() {
  stage_names+=("$1")
  stage_seconds+=($((SECONDS - stage_start)))
  stage_start=$SECONDS
}
report_stages() {
  local total=0 i
  echo "== stage times (s)"
  for i in "${!stage_names[@]}"; do
    printf '  %-28s %5d\n' "${stage_names[$i]}" "${stage_seconds[$i]}"
    total=$((total + stage_seconds[i]))
  done
  printf '  %-28s %5d\n' total "$total"
}
trap report_stages EXIT

sanitizer_stage=0
if [ $# -eq 0 ] && { [ "${SANITIZE_STAGE:-1}" != 0 ] || [ "${FUZZ_STAGE:-1}" != 0 ]; }; then
  sanitizer_stage=1
fi
if [ "$sanitizer_stage" = 1 ]; then EXTRA_PACKAGES=clang ./scripts/setup.sh; else ./scripts/setup.sh; fi
stage_done setup
./scripts/build.sh
stage_done build
# libinfinipath, loaded with libfabric, turns a crash of any test binary into
# exit status 1 and a backtrace file in the working directory unless this is
# set; with it a crash is reported as one.
export IPATH_NO_BACKTRACE=1
# What `chorus` sets for itself and re-executes for (node/main.cc): set here,
# the hundreds of node processes the suite starts need not re-execute.
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.hugetlb=1}
unit_targets="chorus_common_tests chorus_topologies_tests chorus_kernels_tests chorus_gossip_tests chorus_trainer_tests"
if [ "${SANITIZE_STAGE:-1}" = 0 ]; then unit_targets=""; fi
sanitizer_build=""
if [ "$sanitizer_stage" = 1 ]; then
  idle=(nice -n 19)
  if command -v chrt >/dev/null && chrt --idle 0 true 2>/dev/null; then idle=(chrt --idle 0); fi
  # In a session of its own, so that an early exit stops the whole build.
  # One compiler at a time: two beside the suite slowed its tests by about
  # 40% (shared caches and memory bandwidth), one leaves a CPU to them.
  # A test that fails at the idle class (starved past a timeout) is run
  # again after the suite: only that run's result counts.
  rm -f build-fuzz/unit-tests.passed
  EXTRA_TARGETS="$unit_targets" FUZZ_BUILD_ONLY=1 FUZZ_BUILD_JOBS=1 setsid "${idle[@]}" bash -c \
    './scripts/fuzz.sh && if [ -n "$1" ]; then CTEST_JOBS=$(nproc) ./scripts/sanitizer_tests.sh; fi' \
    _ "$unit_targets" >build-fuzz.log 2>&1 &
  sanitizer_build=$!
  trap 'kill -- -"$sanitizer_build" 2>/dev/null || true; report_stages' EXIT
fi
# Two ctest slots a CPU: the multi-process tests take two each
# (tests/CMakeLists.txt), so one of them runs a CPU as before, and the
# one-process tests, which mostly wait, fill what they leave.
slots=$((2 * $(nproc 2>/dev/null || echo 2)))
suite=0
(cd build && ctest --output-on-failure -j"$slots" --timeout 600 "$@") 2>&1 |
  tee build/ctest-output.log || suite=$?
echo "== the 20 slowest tests"
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' build/ctest-output.log |
  sort -g -r | head -20 | awk '{printf "  %8.2f s  %s\n", $1, $2}' || true
stage_done suite
[ "$suite" -eq 0 ] || exit "$suite"
# Then the unit tests (common, topologies, kernels, gossip, trainer) under
# ASan and UBSan, and every libFuzzer target on its seeds, FUZZ_SECONDS each
# when set, else FUZZ_TOTAL_SECONDS (default 100) for all of them together,
# split evenly (the stage took about 100 s with 9 targets at 20 s, two at a
# time): both from the clang build above (./build-fuzz; setup.sh installs
# clang for it). A memory error, undefined behaviour, or a crash on
# any fuzz input fails the suite. SANITIZE_STAGE=0 skips the unit tests
# there, FUZZ_STAGE=0 the fuzzers.
if [ "$sanitizer_stage" = 1 ]; then
  fuzz_seconds=${FUZZ_SECONDS:-}
  if [ "${FUZZ_STAGE:-1}" = 0 ]; then fuzz_seconds=0; fi
  # What is left of it, now on every CPU: the idle build stops (make deletes
  # what it was compiling) and goes on at normal priority.
  kill -- -"$sanitizer_build" 2>/dev/null || true
  wait "$sanitizer_build" 2>/dev/null || true
  if ! EXTRA_TARGETS="$unit_targets" FUZZ_BUILD_ONLY=1 ./scripts/fuzz.sh >>build-fuzz.log 2>&1; then
    tail -50 build-fuzz.log
    echo "test.sh: the sanitizer build failed (build-fuzz.log)"
    exit 1
  fi
  stage_done "sanitizer build (after suite)"
  if [ -n "$unit_targets" ] && ./scripts/sanitizer_tests.sh --passed; then
    echo "== unit tests under ASan+UBSan: passed during the suite ($(grep -E 'tests passed' build-fuzz.log | tail -1))"
  elif [ -n "$unit_targets" ]; then
    ./scripts/sanitizer_tests.sh
    stage_done "unit tests, ASan+UBSan"
  fi
  if [ "$fuzz_seconds" != 0 ]; then
    if [ -n "$fuzz_seconds" ]; then
      ./scripts/fuzz.sh "$fuzz_seconds"
    else
      FUZZ_TOTAL_SECONDS=${FUZZ_TOTAL_SECONDS:-100} ./scripts/fuzz.sh
    fi
    stage_done "fuzzing"
  fi
fi
