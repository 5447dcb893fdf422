#!/usr/bin/env bash
# The GPU table: Chorus's GPU trainer beside PyTorch AMP (eager, and the whole
# step captured in a CUDA graph), back to back
# on the same GPU, mlp / cnn / cnn-bn at batch 64, 256 and 1024 (medians of 7
# windows), then the kernel bandwidths (docs/gpu.md, "Benchmarks"). Run on a
# machine with a GPU, from the repository root, after building
# (./scripts/build.sh):
#   bench/gpu_vs_torch.sh [build-dir]
set -euo pipefail
build=${1:-build}
models=mlp,cnn,cnn-bn
batches=64,256,1024
echo "== Chorus (fp16 + LARS, CUDA graphs)"
"$build/bench/bench_train" --device cuda:0 --models "$models" --batches "$batches" --precisions fp16
echo "== Chorus without CUDA graphs"
"$build/bench/bench_train" --device cuda:0 --models "$models" --batches "$batches" --precisions fp16 --no-cuda-graphs
echo "== PyTorch eager AMP (SGD foreach: cheaper than LARS)"
python3 bench/torch_amp_gpu.py --models "$models" --batches "$batches"
echo "== PyTorch eager AMP, LARS with foreach ops"
python3 bench/torch_amp_gpu.py --models "$models" --batches "$batches" --optimizer lars
echo "== PyTorch AMP, the whole step in one CUDA graph (static loss scale), SGD and LARS"
python3 bench/torch_amp_gpu.py --models "$models" --batches "$batches" --cuda-graph
python3 bench/torch_amp_gpu.py --models "$models" --batches "$batches" --cuda-graph --optimizer lars
echo "== Kernel bandwidth"
"$build/bench/chorus_bench_kernels_gpu"
