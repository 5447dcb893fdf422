#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" --timeout 600 "$@"
