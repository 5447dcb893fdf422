#!/usr/bin/env bash
# Configures and builds Chorus in ./build (Release). Used by the Quick start scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CHORUS_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"${jobs}"
