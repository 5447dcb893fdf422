#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in ./build-fuzz and runs each for SECONDS
# (default 60) on its seed corpus: the repository's example configs and
# comparison files, a Fashion-MNIST labels file, and a checkpoint and model
# file written by a quick run of ./build/chorus (scripts/build.sh) when there is one. New inputs collect in build-fuzz/corpus/<target>
# (kept between runs); a crash leaves build-fuzz/crash-<target>-* and fails.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 600 config codec
# EXTRA_TARGETS (space-separated) are built in the same build beside the
# fuzzers: scripts/test.sh builds the unit tests so and runs them there, so
# one sanitizer build serves both. FUZZ_JOBS fuzzers run at a time (default:
# one per core), FUZZ_BUILD_JOBS compilers (default: one per core).
# FUZZ_BUILD_ONLY=1 builds and runs nothing. FUZZ_TOTAL_SECONDS, when set,
# is the whole run's time instead: each target gets it divided by the rounds
# in which FUZZ_JOBS of them run side by side (scripts/test.sh uses this, so
# that a new target costs the others time, not the run).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRA_PACKAGES=clang ./scripts/setup.sh
seconds=${1:-60}
shift || true
all=(control_message control_frame config safetensors checkpoint codec idx compare data_seal
     pairwise_wire push_sum_wire live_state_wire outer_sync_wire trainer_state_wire segment_name)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
dir=build-fuzz
jobs=$(nproc 2>/dev/null || echo 2)
build_jobs=${FUZZ_BUILD_JOBS:-$jobs}
# -O1 -g1: what ASan's reports need (function names and line numbers) at
# a cheaper compile than -O2 -g.
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCHORUS_FUZZ=ON -DCHORUS_SANITIZE=address,undefined -DCHORUS_CUDA=OFF -DCHORUS_BUILD_BENCH=OFF \
  -DCHORUS_BUILD_TESTS=ON >/dev/null
build=()
for t in "${targets[@]}"; do build+=(--target "fuzz_$t"); done
for t in ${EXTRA_TARGETS:-}; do build+=(--target "$t"); done
cmake --build "$dir" -j"$build_jobs" "${build[@]}"
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0
source scripts/sanitizer_env.sh

# Seeds that are not files of the repository.
seeds="$dir/seeds"
mkdir -p "$seeds/idx" "$seeds/checkpoint"
data=/usr/share/datasets/fashion-mnist
[ -f "$data/t10k-labels-idx1-ubyte.gz" ] && cp "$data/t10k-labels-idx1-ubyte.gz" "$seeds/idx/"
if [ ! -f "$seeds/checkpoint/checkpoint.safetensors" ] && [ -x build/chorus ]; then
  build/chorus node configs/examples/quick-test.toml --set run.output_dir=\""$seeds/run"\" \
    --set run.progress=\"off\" --set data.train_limit=256 --set data.test_limit=64 >/dev/null
  cp "$seeds/run/quick-test/"*/checkpoint.safetensors "$seeds/checkpoint/"
  cp "$seeds/run/quick-test/"*/model.safetensors "$seeds/checkpoint/"
fi
# fuzz/seeds/<target>: inputs kept in the repository, hand-made or found by
# an earlier run to reach new code.
# Every target has some (fuzz/seeds/make_seeds.py wrote those of the file
# formats); the config and comparison parsers also start from the
# repository's files, and the checkpoint and safetensors readers from a whole
# checkpoint of a quick run.
declare -A seed_dirs=(
  [config]="configs configs/examples" [compare]="configs/compare" [idx]="$seeds/idx"
  [checkpoint]="$seeds/checkpoint" [safetensors]="$seeds/checkpoint"
)
for t in "${all[@]}"; do seed_dirs[$t]="${seed_dirs[$t]:-} fuzz/seeds/$t"; done

# One fuzzer: its run, then its log's stats on one line; a finding leaves
# the log's tail and a "$dir/failed-<target>" mark.
fuzz_one() {
  local t=$1 corpus="$dir/corpus/$1"
  mkdir -p "$corpus"
  rm -f "$dir/failed-$t"
  # shellcheck disable=SC2086
  if ! "$dir/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$dir/crash-$t-" "$corpus" ${seed_dirs[$t]:-} 2>"$dir/fuzz_$t.log"; then
    touch "$dir/failed-$t"
  fi
}

fuzz_jobs=${FUZZ_JOBS:-$jobs}
if [ -n "${FUZZ_TOTAL_SECONDS:-}" ]; then
  rounds=$(((${#targets[@]} + fuzz_jobs - 1) / fuzz_jobs))
  seconds=$((FUZZ_TOTAL_SECONDS / rounds))
  [ "$seconds" -ge 1 ] || seconds=1
fi
running=0
for t in "${targets[@]}"; do
  echo "== fuzz_$t for ${seconds}s"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$fuzz_jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
failed=()
for t in "${targets[@]}"; do
  echo -n "fuzz_$t: "
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$dir/fuzz_$t.log" | tr '\n' ' ' || true
  echo
  if [ -f "$dir/failed-$t" ]; then
    failed+=("$t")
    tail -40 "$dir/fuzz_$t.log"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]} (inputs in $dir/crash-*)"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no findings"
