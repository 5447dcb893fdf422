#!/usr/bin/env bash
# Runs Chorus and its peer baselines back to back, one at a time, so that the
# figures are ratios measured side by side (docs/performance.md,
# "`bench/compare_peers.sh`").
#   bench/compare_peers.sh train    # training samples/s: PyTorch CPU vs bench_train, a ratio table with the CPU and each side's BLAS
#   bench/compare_peers.sh ddp      # NODES-node MLP (default 4), s/epoch: PyTorch DDP (gloo) vs chorus all-reduce
#   bench/compare_peers.sh p2p      # fi_pingpong vs chorus bench p2p, medians of ROUNDS
#   bench/compare_peers.sh allreduce  # Open MPI MPI_Allreduce and torch.distributed gloo vs chorus bench allreduce, 4 ranks, medians of ROUNDS
#   bench/compare_peers.sh pairs      # the same, one size and provider at a time right after its Open MPI run: median of the pairs' ratios
#                                     # (PROVIDERS="net,tcp;ofi_rxm" picks providers; CHORUS_FLAGS adds flags to chorus bench allreduce)
# Needs ./build (scripts/build.sh); PEERS, the folder of the peer baseline
# scripts (PyTorch CPU training, DDP with gloo, Open MPI all-reduce,
# torch.distributed all-reduce; not part of this repository), which is copied
# to a temporary folder; mpicc and mpirun (Open MPI), fi_pingpong
# (libfabric-bin) and python3 with PyTorch.
set -u
: "${PEERS:?set PEERS to the folder of the peer baseline scripts (train_torch.py, ddp_torch.py, allreduce_torch.py, mpi_allreduce.c, blas_env.sh)}"
cd "$(dirname "$0")/.."
peers=$PEERS
work=$(mktemp -d)
cp -r "$peers"/. "$work"/ && chmod -R u+w "$work"
PY=${PY:-/usr/bin/python3}  # a Python with PyTorch
step=${1:-train}

# Open MPI's MPI_Allreduce over one class of transport, $n ranks (built once
# below for the steps that run it):
#   mpi_allreduce shm|tcp BYTES... -> rows: bytes iters median_us mean_us min_us algbw busbw
mpi_allreduce() {
  local mca="--mca btl self,vader"
  [ "$1" = tcp ] && mca="--mca btl self,tcp --mca btl_tcp_if_include lo"
  timeout 300 mpirun --allow-run-as-root --oversubscribe --mca pml ob1 $mca -np $n \
    "$work/mpi_allreduce" "${@:2}" 2>&1 | grep -v '^#'
}

if [ "$step" = allreduce ] || [ "$step" = pairs ]; then
  mpicc -O2 -o "$work/mpi_allreduce" "$work/mpi_allreduce.c" || exit 1
fi

if [ "$step" = train ]; then
  # ROUNDS rounds (default 5), each running every (model, batch) under PyTorch
  # and then under bench_train, so that the two sides alternate; the table has
  # the medians over rounds of each run's median window, and the ratios.
  rows="$work/train.txt"
  : > "$rows"
  (cd "$work" && source ./blas_env.sh &&
   $PY - > "$work/torch_blas.txt" <<'PYEOF'
import ctypes, torch
torch.ones(64, 64) @ torch.ones(64, 64)
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if ".so" in l and ("blas" in l or "mkl" in l)})
config = "?"
for path in libs:
    try:
        get = ctypes.CDLL(path).openblas_get_config
        get.restype = ctypes.c_char_p
        config = get().decode()
        break
    except (OSError, AttributeError):
        pass
print("PyTorch %s, %d threads; BLAS %s (%s)" % (torch.__version__, 2, " ".join(libs), config))
PYEOF
  )
  for round in $(seq "${ROUNDS:-5}"); do
    for m in mlp cnn; do for b in 64 256; do
      (cd "$work" && source ./blas_env.sh &&
       timeout 300 $PY train_torch.py bench --model $m --batch $b --threads 2 --windows ${WINDOWS:-3} \
         --window-s 2 --warmup 30 --out "$work/torch.jsonl" > /dev/null &&
       $PY -c "import json; d=json.loads(open('$work/torch.jsonl').readlines()[-1]); print('torch', d['model'], d['batch'], d['samples_per_s_median'])") >> "$rows"
      ./build/bench/bench_train --threads 2 --models $m --batches $b --windows "${WINDOWS:-3}" \
        --window-s 2 --warmup 30 > "$work/chorus.txt"
      grep '^# gemm' "$work/chorus.txt" | head -1 > "$work/chorus_gemm.txt"
      awk -v m=$m '$1 == m { print "chorus-" $2, $1, $3, $5 }' "$work/chorus.txt" >> "$rows"
    done; done
  done
  echo "host: $(lscpu | sed -n 's/^Model name: *//p' | head -1) (family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p')$(grep -q avx512f /proc/cpuinfo && echo ', AVX-512')), $(nproc) cores; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
  echo "peer: $(cat "$work/torch_blas.txt")"
  echo "chorus: bench_train, 2 threads; $(sed 's/^# //' "$work/chorus_gemm.txt")"
  $PY - "$rows" <<'PYEOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    side, model, batch, rate = line.split()
    runs.setdefault((model, int(batch)), {}).setdefault(side, []).append(float(rate))
print("| model | batch | PyTorch (samples/s) | Chorus fp32 | ratio | Chorus fp16 | ratio | rounds |")
print("|---|---|---|---|---|---|---|---|")
for (model, batch), sides in sorted(runs.items()):
    torch = statistics.median(sides.get("torch", [float("nan")]))
    cells = []
    for side in ("chorus-fp32", "chorus-fp16"):
        rate = statistics.median(sides.get(side, [float("nan")]))
        cells += ["%.0f" % rate, "%.2fx" % (rate / torch)]
    print("| %s | %d | %.0f | %s | %d |" % (model, batch, torch, " | ".join(cells), len(sides.get("torch", []))))
PYEOF
fi

if [ "$step" = ddp ]; then
  # NODES processes (default 4), each with one thread, ROUNDS rounds (default
  # 1), each PyTorch DDP (gloo) and then every Chorus variant, so that the two
  # sides alternate. NODES=2 on a 2-core host gives each process a core of its
  # own: 4 processes on 2 cores time the scheduler, not the transport
  # (docs/performance.md, "Cores of their own").
  nodes=${NODES:-4}
  out=$(mktemp -d)
  for round in $(seq "${ROUNDS:-1}"); do
    (cd "$work" && source ./blas_env.sh &&
     timeout 300 $PY ddp_torch.py --nprocs $nodes --epochs ${EPOCHS:-3} --batch 64 --lr 0.1 --threads 1 \
       --seed 0 --port 29761 --out "$work/ddp.jsonl" | cut -c1-400)
    # Chorus over tcp (gloo's transport class) with the default auto algorithm
    # and with the ring (gloo's), then the one-host choice: shm with auto.
    for variant in "tcp-auto tcp;ofi_rxm auto" "tcp-ring tcp;ofi_rxm ring" "net-auto net auto" "shm-auto shm auto"; do
      set -- $variant
      ./build/chorus launch -n $nodes configs/allreduce-ring.toml --set train.epochs=${EPOCHS:-3} \
        --set train.threads=1 --set run.progress=\"off\" --set run.output_dir=\"$out\" \
        --set run.name=\"$1-$round\" --set fabric.provider=\"$2\" --set exchange.algorithm=\"$3\" \
        > "$out/$1-$round.log" 2>&1
      f="$out/$1-$round/node0/summary.json"
      $PY -c "import json,sys; s=json.load(open('$f')); print('chorus $1 round $round', s['node'], 'train_s', round(s['train_seconds'],2), 's/epoch', round(s['train_seconds']/s['epochs'],2), 'test_acc', s['test_accuracy'])"
    done
  done
fi

if [ "$step" = p2p ]; then
  # ROUNDS rounds (default 3), each fi_pingpong then chorus bench p2p at the
  # same sizes, then per provider and size the medians and their ratios. tcp
  # has two fi_pingpong rows: its msg endpoint (what the peer baseline quotes) and
  # the rdm endpoint over ofi_rxm, the provider stack Chorus runs on; net (tcp's
  # native RDM endpoint) is compared with both its rdm and tcp's msg endpoint.
  rows="$work/p2p.txt"
  : > "$rows"
  for round in $(seq "${ROUNDS:-3}"); do
    for fi in "shm shm rdm" "tcp;ofi_rxm tcp msg" "tcp;ofi_rxm tcp;ofi_rxm rdm" "net net rdm" "net tcp msg"; do
      set -- $fi
      for size in 4096 1048576 4194304 16777216 67108864; do
        iters=$([ $size -gt 1048576 ] && echo $((1073741824 / size < 64 ? 16 : 64)) || echo 1000)
        timeout 120 fi_pingpong -p "$2" -e $3 -I $iters -S $size -B 29777 >/dev/null 2>&1 &
        sleep 0.5
        # fi_pingpong columns: bytes iters total size time MB/sec usec/xfer Mxfers/sec
        timeout 120 fi_pingpong -p "$2" -e $3 -I $iters -S $size -P 29777 127.0.0.1 2>&1 |
          grep -E '^[0-9]+[kmg]? ' | tail -1 |
          awk -v p="$1" -v n="fi_pingpong-$2-$3" -v s=$size '{print p, n, s, $7, $6 / 1000}' >> "$rows"
        wait
      done
    done
    ./build/chorus bench p2p --min-size 4KiB --max-size 64MiB | awk '
      $1 == "shm" || $1 == "tcp;ofi_rxm" || $1 == "net" {
        u = $4; s = $3 * (u == "MiB" ? 1048576 : u == "KiB" ? 1024 : 1)
        print $1, "chorus", s, $7, $8 }' >> "$rows"
  done
  $PY - "$rows" <<'PY'
import statistics, sys, collections
cells = collections.defaultdict(lambda: ([], []))
for line in open(sys.argv[1]):
    prov, who, size, lat, bw = line.split()
    lat_list, bw_list = cells[(prov, who, int(size))]
    lat_list.append(float(lat)); bw_list.append(float(bw))
med = {k: (statistics.median(v[0]), statistics.median(v[1]), len(v[0])) for k, v in cells.items()}
print("medians; latency = usec/xfer (half round trip, mean), bandwidth GB/s; ratio = chorus / peer")
print("%-12s %-30s %9s %10s %9s %10s %9s" % ("provider", "peer", "size", "peer_us", "peer_GB/s", "chorus_us", "chorus_GB/s"))
for (prov, who, size), (lat, bw, n) in sorted(med.items()):
    if who == "chorus" or (prov, "chorus", size) not in med: continue
    clat, cbw, _ = med[(prov, "chorus", size)]
    print("%-12s %-30s %9d %10.2f %9.2f %10.2f %9.2f   lat x%.2f  bw x%.2f  (%d rounds)" %
          (prov, who, size, lat, bw, clat, cbw, clat / lat, cbw / bw, n))
PY
fi
if [ "$step" = allreduce ]; then
  # ROUNDS rounds (default 3), each Open MPI shm, Open MPI tcp, torch.distributed
  # with gloo (tcp class; GLOO=0 skips it), then chorus bench allreduce at the
  # same sizes (ALGORITHMS; shared-memory runs with shm only), shm then tcp, then
  # bench_loopback_ring (plain sockets, the tcp class's reference); then per transport, size and
  # algorithm the medians and the ratios against the best peer of the same class
  # (RANKS=2 for two ranks). All time a call as the slowest rank's and take the
  # median over calls.
  n=${RANKS:-4}
  rows="$work/allreduce.txt"
  : > "$rows"
  for round in $(seq "${ROUNDS:-3}"); do
    for tr in shm tcp; do
      mpi_allreduce $tr 4096 1048576 16777216 | awk -v t=$tr '{print t, "openmpi", $1, $3}' >> "$rows"
    done
    if [ "${GLOO:-1}" = 1 ]; then
      (cd "$work" && timeout 300 $PY allreduce_torch.py --nprocs $n --sizes 4096 1048576 16777216 \
         --budget 1 --port $((29811 + round)) --out "$work/gloo.jsonl" > /dev/null 2>&1)
      $PY -c "
import json
for l in open('$work/gloo.jsonl'):
    r = json.loads(l)
    if r['correct']: print('tcp gloo', r['bytes'], r['median_us'])" >> "$rows"
      rm -f "$work/gloo.jsonl"
    fi
    # net (tcp's native RDM endpoint) is in the tcp class: its rows are chorus-net-*.
    ./build/chorus bench allreduce --ranks $n --provider 'shm,net,tcp;ofi_rxm' --quick \
      --algorithms "${ALGORITHMS:-auto,shared-memory,ring,halving-doubling}" | tee -a "$work/chorus.txt" | awk '
      /^# provider/ { t = ($3 == "shm") ? "shm" : "tcp"; w = ($3 == "net") ? "chorus-net-" : "chorus-" }
      $3 == "float" { print t, w $4, $1, $6 }' >> "$rows"
    # The tcp class's reference, not a peer: a ring of plain TCP sockets moving a
    # ring all-reduce's bytes and adding them, with no step waiting for another.
    ./build/bench/bench_loopback_ring $n 3 | awk '$2 == "add" && $1 <= 16777216 { print "tcp", "socket-ring", $1, $3 }' >> "$rows"
  done
  $PY - "$rows" "$n" <<'PY'
import statistics, sys, collections
n = int(sys.argv[2])
cells = collections.defaultdict(list)
for line in open(sys.argv[1]):
    tr, who, size, us = line.split()
    cells[(tr, int(size), who)].append(float(us))
print("float32, %d ranks, medians over rounds; busbw = size / time * 2(n-1)/n; ratio = best peer's time / this time (> 1: faster than the best peer of the class)" % n)
print("%-4s %9s %-28s %10s %8s %7s %-8s %s" % ("tr", "size", "who", "time_us", "busbw", "ratio", "best", "rounds"))
peers = ("openmpi", "gloo")
for (tr, size, who) in sorted(cells):
    us = statistics.median(cells[(tr, size, who)])
    busbw = size / (us * 1e-6) / 1e9 * 2 * (n - 1) / n
    best = min(((statistics.median(cells[(tr, size, p)]), p) for p in peers if (tr, size, p) in cells),
               default=(float("nan"), "-"))
    print("%-4s %9d %-28s %10.1f %8.3f %7.2f %-8s %s" % (tr, size, who, us, busbw, best[0] / us, best[1],
          " ".join("%.0f" % v for v in cells[(tr, size, who)])))
PY
fi
if [ "$step" = pairs ]; then
  # The host's speed can drift between runs a few seconds apart (docs/performance.md,
  # "The host's two speed modes (2026-11-24)"), and `allreduce` measures a round's
  # Open MPI sizes some 20 s before its Chorus ones. Here each pair is one size
  # and one Chorus provider: Open MPI of the same class (shared memory for shm,
  # tcp for net and tcp;ofi_rxm) and `chorus bench allreduce` (ALGORITHMS,
  # default auto) back to back, about a second each, the order alternating
  # between rounds; each pair gives a ratio (Open MPI's time / Chorus's) and the
  # table prints the median ratio over ROUNDS pairs (default 7) beside the
  # medians of the times. gloo (slower than Open MPI tcp where measured) is
  # left to `allreduce`.
  n=${RANKS:-4}
  rows="$work/pairs.txt"
  : > "$rows"
  ompi() {  # $1 class (shm|tcp) $2 bytes -> median us
    AR_BUDGET=0.8 mpi_allreduce "$1" "$2" | awk '{print $3}'
  }
  chorus() {  # $1 provider $2 bytes -> median us of the float32 row
    # shellcheck disable=SC2086  # CHORUS_FLAGS: extra flags, split on spaces
    ./build/chorus bench allreduce --ranks $n --provider "$1" --algorithms "${ALGORITHMS:-auto}" \
      --min-size "$2" --max-size "$2" --seconds 0.8 --warmup 0.3 ${CHORUS_FLAGS:-} 2>/dev/null |
      awk '$3 == "float" {print $6; exit}'
  }
  IFS=, read -r -a providers <<< "${PROVIDERS:-shm,net,tcp;ofi_rxm}"
  for round in $(seq "${ROUNDS:-7}"); do
    for size in ${SIZES:-4096 1048576 16777216}; do
      for provider in "${providers[@]}"; do
        class=$([ "$provider" = shm ] && echo shm || echo tcp)
        if [ $((round % 2)) = 1 ]; then peer=$(ompi $class $size); mine=$(chorus "$provider" $size)
        else mine=$(chorus "$provider" $size); peer=$(ompi $class $size); fi
        echo "$provider $size ${peer:-nan} ${mine:-nan}" >> "$rows"
      done
    done
  done
  $PY - "$rows" "$n" <<'PY'
import collections, math, statistics, sys
n = int(sys.argv[2])
cells = collections.defaultdict(list)
for line in open(sys.argv[1]):
    provider, size, peer, mine = line.split()
    cells[(provider, int(size))].append((float(peer), float(mine)))
print("float32, %d ranks; each pair = Open MPI of the class then Chorus (or the reverse), back to back;"
      " ratio = Open MPI time / Chorus time (> 1: Chorus faster); busbw = size / time * 2(n-1)/n" % n)
print("%-12s %9s %10s %10s %8s %8s  %s" % ("provider", "size", "ompi_us", "chorus_us", "busbw", "ratio", "pair ratios"))
for (provider, size), pairs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    ok = [(p, m) for p, m in pairs if not (math.isnan(p) or math.isnan(m)) and m > 0]
    if not ok:
        print("%-12s %9d  no complete pair" % (provider, size)); continue
    ratios = [p / m for p, m in ok]
    mine = statistics.median(m for _, m in ok)
    print("%-12s %9d %10.1f %10.1f %8.3f %8.2f  %s" % (
        provider, size, statistics.median(p for p, _ in ok), mine,
        size / (mine * 1e-6) / 1e9 * 2 * (n - 1) / n, statistics.median(ratios),
        " ".join("%.2f" % r for r in ratios)))
PY
fi
rm -rf "$work"
