#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and run the main job:
# the default comparison of gossip against all-reduce (4 local nodes per method,
# MLP on Fashion-MNIST, 3 epochs). Prints the table and the report's path
# (runs/compare-default/report.html). Arguments go to `chorus compare`, e.g.
#   ./scripts/main_job.sh configs/compare/link-1gbit.toml
#   ./scripts/main_job.sh --methods allreduce,dpsgd-ring --epochs 1
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# The binary it runs (scripts/test.sh builds the rest). The main job trains
# on CPUs: without an NVIDIA GPU here, the CUDA backend is not compiled for it
# (nvcc's share of the build); scripts/test.sh compiles it where CUDA is
# installed, at the cost of the few objects that differ.
if [[ -z "${CHORUS_CUDA:-}" ]] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  export CHORUS_CUDA=OFF
fi
./scripts/build.sh chorus
if [[ $# -eq 0 || "$1" == -* ]]; then
  set -- configs/compare/default.toml "$@"
fi
exec ./build/chorus compare "$@"
