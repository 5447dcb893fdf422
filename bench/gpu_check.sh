#!/usr/bin/env bash
# Everything a machine with a GPU can tell about Chorus's CUDA backend, in one
# command of a few minutes, with one summary at the end (docs/gpu.md):
#
#   bench/gpu_check.sh [build-dir]        # from the repository root
#
# It builds nothing (./scripts/build.sh first, or scripts/bundle.sh for a
# machine without the packages) and runs, in order:
#   1. the GPU tests (ctest -L gpu, or the test binary where CTest is absent),
#      with the per-tensor gradient record of the one-pass comparison;
#   2. a CPU node and a GPU node started by hand, GPU first, as one cluster
#      (configs/examples/local-pair-node*.toml): do they end with one model?
#   3. 4 nodes, node3 on the GPU, under balanced all-reduce: does the GPU take
#      a share of the global batch in proportion to its measured speed?
#   4. the training table beside PyTorch AMP, eager and with the whole step in
#      one CUDA graph (bench/torch_amp_gpu.py), with the ratios;
#   5. the kernel bandwidths (chorus_bench_kernels_gpu);
#   6. where the machine has 8 cores or more (a GPU host's CPUs are the
#      multi-core machine a 2-core development host lacks): the all-reduce
#      with a core per rank (bench/allreduce_cores.sh, GPU_CHECK_CORE_ROUNDS
#      rounds, default 1, about 2.5 min a round; with GPU_CHECK_FIT=1 also
#      its FIT stage, about 3 min more: auto against the best per size, and
#      the crossovers fitted there), what the data plane's guards cost at 4
#      nodes (bench/guard_cost.sh) and, with PEERS set
#      (bench/compare_peers.sh), 4-node training against PyTorch DDP.
# Steps 1-5 took 2.5 min on an H200. GPU_CHECK_CPUS=0 skips step 6.
# GPU_CHECK_WINDOWS / GPU_CHECK_WINDOW_S size step 4 (default 3 windows of
# 1 s, the median reported). Outputs go to runs/gpu-check/.
set -uo pipefail
build=${1:-build}
windows=${GPU_CHECK_WINDOWS:-3}
window_s=${GPU_CHECK_WINDOW_S:-1}
out=runs/gpu-check
rm -rf "$out" && mkdir -p "$out"
summary=()
note() { summary+=("$1"); }
section() { echo; echo "=== $1 ($(date +%T))"; }

section "device"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"; then
  echo "gpu_check: nvidia-smi finds no GPU"; exit 1
fi
note "device: $(head -1 "$out/device.txt"); host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"

section "1. GPU tests"
if command -v ctest > /dev/null && [[ -f "$build/CTestTestfile.cmake" ]]; then
  (cd "$build" && ctest -L gpu --output-on-failure -V) > "$out/tests.log" 2>&1
else
  "$build/tests/chorus_cuda_tests" > "$out/tests.log" 2>&1
fi
grep -E "^\S*\[ GPU \]|tests passed|\[  (PASSED|FAILED)  \]|Failure|Expected|Which is|actual" "$out/tests.log" |
  sed 's/^[0-9]*: //' | sort -u -s -k1,1 | head -80
passed=$(grep -cE "\[       OK \]" "$out/tests.log"); skipped=$(grep -oE "\[  SKIPPED \] [A-Za-z0-9_./]+" "$out/tests.log" | sort -u | wc -l)
failed_names=$(grep -E '\[  FAILED  \] [A-Za-z]' "$out/tests.log" | sed -E 's/.*FAILED  \] ([^ ,]+).*/\1/' | sort -u)
note "GPU tests: $passed passed, $skipped skipped, $(echo -n "$failed_names" | grep -c .) failed \
$(echo $failed_names)"

# A node's summary.json figure: summary_of RUN NODE KEY
summary_of() {
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$out/$1/$2/summary.json" "$3" \
    2> /dev/null || echo "?"
}

section "2. a CPU node and a GPU node, started by hand, GPU first"
pair=(--output "$out" --run pair --epochs 2)
timeout 300 "$build/chorus" node configs/examples/local-pair-node1.toml "${pair[@]}" --set 'train.device="cuda:0"' \
  > "$out/pair-node1.log" 2>&1 &
gpu_pid=$!
sleep 1
timeout 300 "$build/chorus" node configs/examples/local-pair-node0.toml "${pair[@]}" > "$out/pair-node0.log" 2>&1
cpu_rc=$?
wait "$gpu_pid"
gpu_rc=$?
c0=$(summary_of pair node0 parameter_checksum); c1=$(summary_of pair node1 parameter_checksum)
verdict=$([[ $cpu_rc == 0 && $gpu_rc == 0 && $c0 == "$c1" && $c0 != "?" ]] && echo "one model" || echo "FAILED")
note "pair (cpu + gpu, MLP, 2 epochs): exit $cpu_rc/$gpu_rc, accuracy $(summary_of pair node0 test_accuracy) / \
$(summary_of pair node1 test_accuracy), $verdict"
tail -n 3 "$out/pair-node0.log" "$out/pair-node1.log"

section "3. 4 nodes, node3 on the GPU, balanced all-reduce"
threads=$(( $(nproc) >= 16 ? 2 : 1 ))
timeout 400 "$build/chorus" launch -n 4 configs/allreduce-ring.toml --set run.output_dir="\"$out\"" \
  --set run.name='"balanced"' --set train.epochs=3 --set train.balance='"time"' --set exchange.algorithm='"auto"' \
  --set train.threads=$threads --node-set '3:train.device="cuda:0"' > "$out/balanced.log" 2>&1
balanced_rc=$?
python3 - "$out/balanced" "$balanced_rc" > "$out/balanced.txt" <<'EOF'
import json, os, sys
run, rc = sys.argv[1], sys.argv[2]
nodes = [json.load(open(os.path.join(run, n, "summary.json"))) for n in sorted(os.listdir(run))
         if os.path.exists(os.path.join(run, n, "summary.json"))]
if len(nodes) != 4:
    print(f"balanced all-reduce: exit {rc}, {len(nodes)} of 4 summaries: FAILED")
    sys.exit()
samples = sum(n["samples"] for n in nodes)
speed = sum(n["compute_samples_per_s"] for n in nodes)
for n in nodes:
    print(f"  {n['node']} {n['device']:7} samples {n['samples']:>7} ({n['samples'] / samples:.3f} of all)  "
          f"speed {n['compute_samples_per_s']:>10.0f}/s ({n['compute_samples_per_s'] / speed:.3f} of all)  "
          f"accuracy {n['test_accuracy']:.4f}")
gpu = [n for n in nodes if n["device"] != "cpu"][0]
one = len({n["parameter_checksum"] for n in nodes}) == 1
print(f"balanced all-reduce (3 cpu + 1 gpu, MLP, 3 epochs): exit {rc}, the GPU took "
      f"{gpu['samples'] / samples:.3f} of the samples at {gpu['compute_samples_per_s'] / speed:.3f} of the speed "
      f"(share/speed {gpu['samples'] / samples / (gpu['compute_samples_per_s'] / speed):.2f}), "
      f"{'one model' if one else 'MODELS DIFFER'}")
EOF
cat "$out/balanced.txt"
note "$(tail -1 "$out/balanced.txt")"

section "4. training throughput beside PyTorch (samples/s, median of $windows windows of ${window_s} s)"
models=mlp,cnn,cnn-bn
batches=64,256,1024
"$build/bench/bench_train" --device cuda:0 --models $models --batches $batches --precisions fp16 \
  --windows "$windows" --window-s "$window_s" | tee "$out/chorus.txt"
torch=(python3 bench/torch_amp_gpu.py --models $models --batches $batches --windows "$windows" --window-s "$window_s")
"${torch[@]}" --json "$out/torch-eager.json" > "$out/torch-eager.txt" 2>&1
"${torch[@]}" --cuda-graph --json "$out/torch-graph.json" > "$out/torch-graph.txt" 2>&1
"${torch[@]}" --cuda-graph --optimizer lars --json "$out/torch-graph-lars.json" > "$out/torch-graph-lars.txt" 2>&1
python3 - "$out" > "$out/table.txt" <<'EOF'
import json, os, sys
out = sys.argv[1]
chorus = {}
for line in open(os.path.join(out, "chorus.txt")):
    f = line.split()
    if len(f) >= 7 and f[0] in ("mlp", "cnn", "cnn-bn") and f[2].isdigit():
        chorus[(f[0], int(f[2]))] = float(f[4])
def torch(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return {}
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return {(r["model"], int(r["batch"])): r["samples_per_s_median"] for r in rows}
eager, graph, lars = torch("torch-eager.json"), torch("torch-graph.json"), torch("torch-graph-lars.json")
print(f"{'model':7} {'batch':>5} {'chorus':>10} {'torch graph':>12} {'graph lars':>11} {'torch eager':>12}"
      f" {'/graph':>7} {'/graph lars':>11} {'/eager':>7}")
ratio = lambda a, b: f"{a / b:.2f}" if a and b else "?"
worst = None
for key in sorted(chorus, key=lambda k: (("mlp", "cnn", "cnn-bn").index(k[0]), k[1])):
    c, g, l, e = chorus[key], graph.get(key), lars.get(key), eager.get(key)
    print(f"{key[0]:7} {key[1]:>5} {c:>10.0f} {g or 0:>12.0f} {l or 0:>11.0f} {e or 0:>12.0f}"
          f" {ratio(c, g):>7} {ratio(c, l):>11} {ratio(c, e):>7}")
    if g and (worst is None or c / g < worst[0]):
        worst = (c / g, key)
mlp = chorus.get(("mlp", 1024), 0)
print(f"throughput: lowest Chorus / PyTorch CUDA graph {worst[0]:.2f} ({worst[1][0]} batch {worst[1][1]}), "
      f"target 1.5; mlp batch 1024 {mlp / 1e6:.2f}M samples/s, target 5M" if worst else "throughput: no PyTorch figures")
EOF
cat "$out/table.txt"
note "$(tail -1 "$out/table.txt")"

section "5. kernel bandwidth"
"$build/bench/chorus_bench_kernels_gpu" | tee "$out/kernels.txt"

if (( $(nproc) >= 8 )) && [[ ${GPU_CHECK_CPUS:-1} == 1 ]]; then
  section "6. the CPUs: all-reduce with a core per rank, training against DDP"
  FIT=${GPU_CHECK_FIT:-0} ROUNDS=${GPU_CHECK_CORE_ROUNDS:-1} CHORUS="$build/chorus" bench/allreduce_cores.sh |
    tee "$out/allreduce.txt"
  note "all-reduce, 4 ranks with a core each, median us (tcp;ofi_rxm ring / net ring / tcp;ofi_rxm auto at 1 MiB): \
$(awk '$1 == "default" && $4 == 1048576 {printf "%s %s %s; ", $2, $3, $5}' "$out/allreduce.txt")"
  ROUNDS=${GPU_CHECK_CORE_ROUNDS:-1} EPOCHS=2 CHORUS="$build/chorus" bench/guard_cost.sh | tee "$out/guard.txt"
  note "the data plane's guards, 4 nodes with cores of their own: $(awk '$2 ~ /^[0-9.]+$/ && $3 == "s" \
{printf "%s %s; ", $1, $4}' "$out/guard.txt")"
  if [[ -n "${PEERS:-}" ]]; then
    PY=python3 ROUNDS=1 bench/compare_peers.sh ddp 2>&1 | tee "$out/ddp.txt"
    note "4-node MLP training, s/epoch: $(python3 - "$out/ddp.txt" <<'PY'
import json, sys
ddp, chorus = [], []
for line in open(sys.argv[1]):
    if line.startswith("{") and '"kind": "ddp"' in line:
        ddp.append(json.loads(line)["epoch_s"])
    elif line.startswith("chorus "):
        f = line.split()
        chorus.append(f"{f[1]} {f[f.index('s/epoch') + 1]}")
print(f"DDP (gloo) {sorted(ddp)[len(ddp) // 2]:.2f}; " if ddp else "DDP: none; ", "; ".join(chorus))
PY
)"
  fi
fi

section "summary"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
