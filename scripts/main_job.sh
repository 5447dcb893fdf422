#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
exec ./build/chorus node "$@"
