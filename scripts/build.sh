#!/usr/bin/env bash
# Configures and builds Chorus in ./build (Release). Used by the Quick start
# scripts. Arguments name targets to build (default: everything, tests and
# benchmarks included), e.g. `scripts/build.sh chorus` for the binary alone.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
# CHORUS_CUDA: AUTO (the default: the backend when CUDA and cuDNN are found),
# ON or OFF; passed every time, so that one run's choice does not stay in
# the cache for the next.
# Ninja where it is installed (scripts/setup.sh installs it): it keeps both
# cores busy across targets where make's recursive build often runs one. A
# build folder configured earlier keeps its generator.
generator=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA="${CHORUS_CUDA:-AUTO}" \
  ${CHORUS_CMAKE_ARGS:-} >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build -j"${jobs}" --target "$@"
else
  cmake --build build -j"${jobs}"
fi
