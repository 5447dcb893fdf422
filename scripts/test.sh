#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
# libinfinipath, loaded with libfabric, turns a crash of any test binary into
# exit status 1 and a backtrace file in the working directory unless this is
# set; with it a crash is reported as one.
export IPATH_NO_BACKTRACE=1
(cd build && ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" --timeout 600 "$@")
# Then the unit tests again under AddressSanitizer and UndefinedBehaviorSanitizer
# (./build-asan, about 8 minutes on 2 cores): memory errors in the transports,
# collectives, kernels and file readers fail the suite. SANITIZE_STAGE=0 skips it.
if [ "${SANITIZE_STAGE:-1}" != 0 ] && [ $# -eq 0 ]; then
  TARGETS="chorus_common_tests chorus_topologies_tests chorus_kernels_tests chorus_gossip_tests chorus_trainer_tests" \
    ./scripts/sanitize.sh -L 'common|topologies|kernels|gossip|trainer'
fi
# Then every libFuzzer target for FUZZ_SECONDS (default 20) on its seeds, under
# ASan/UBSan (./build-fuzz with clang, which setup.sh installs for it): a
# crash or sanitizer report on any input fails the suite. FUZZ_STAGE=0 skips it.
if [ "${FUZZ_STAGE:-1}" != 0 ] && [ $# -eq 0 ]; then
  ./scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
