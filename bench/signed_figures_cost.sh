#!/usr/bin/env bash
# What signing the check's figures costs: NODES (default 3) hand-started
# nodes with per-node credentials (cluster.issuer) train a ring all-reduce
# (configs/allreduce-ring.toml, EPOCHS epochs, default 1, MODEL default mlp)
# under two settings, alternating for ROUNDS rounds (default 3):
#   signed    as shipped: with credentials, from 3 members the figures are
#             gathered in agreement, every part signed (two rounds);
#   oneround  exchange.poison_agreement_up_to = 0: one unsigned round.
# Prints each run's median train_seconds over the nodes, then the median per
# setting and its ratio to oneround, and the median over rounds of each
# round's ratio (steadier where the host's speed drifts).
#   bench/signed_figures_cost.sh
#   ROUNDS=5 EPOCHS=2 bench/signed_figures_cost.sh
# Needs ./build (scripts/build.sh); CHORUS=path overrides the binary.
set -u
cd "$(dirname "$0")/.."
chorus=${CHORUS:-./build/chorus}
nodes=${NODES:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$chorus" credential issuer "$out/issuer.toml" > "$out/issuer.txt" || exit 1
issuer=$(grep -o 'issuer = "[0-9a-f]*"' "$out/issuer.txt" | cut -d'"' -f2)
for i in $(seq 0 $((nodes - 1))); do
  "$chorus" credential issue --issuer "$out/issuer.toml" --name "node$i" "$out/node$i.cred" > /dev/null || exit 1
done
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(date -u +%F), commit $(git rev-parse --short HEAD 2>/dev/null), $nodes nodes"
port=$((20000 + RANDOM % 20000))
for round in $(seq "${ROUNDS:-3}"); do
  for setting in oneround signed; do
    agree=32
    [ "$setting" = oneround ] && agree=0
    run="$setting-$round"
    pids=()
    for i in $(seq 0 $((nodes - 1))); do
      listen="127.0.0.1:0"
      [ "$i" = 0 ] && listen="127.0.0.1:$port"
      "$chorus" node configs/allreduce-ring.toml --set run.node_name="\"node$i\"" --set run.name="\"$run\"" \
        --set run.output_dir="\"$out\"" --set run.progress=off --set cluster.listen="\"$listen\"" \
        --set cluster.bootstrap="[\"127.0.0.1:$port\"]" --set cluster.min_nodes="$nodes" \
        --set cluster.issuer="\"$issuer\"" --set cluster.credential="\"$out/node$i.cred\"" \
        --set train.epochs="${EPOCHS:-1}" --set train.model="\"${MODEL:-mlp}\"" --set train.threads=1 \
        --set train.eval_every_epochs=0 --set exchange.poison_agreement_up_to=$agree > "$out/$run-node$i.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || echo "# $run: a node failed: $(tail -1 "$out/$run-node0.log")"; done
    port=$((port + 1))
    python3 - "$out" "$run" "$nodes" <<'PY'
import json, statistics, sys
out, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = [json.load(open(f"{out}/{run}/node{i}/summary.json"))["train_seconds"] for i in range(n)]
agreed = json.load(open(f"{out}/{run}/node0/summary.json")).get("poison", {}).get("agreed_steps", 0)
print(f"{run}: {statistics.median(t):.2f} s (agreed steps on node0: {agreed})")
PY
  done
done | tee "$out/runs.txt"
python3 - "$out/runs.txt" <<'PY'
import re, statistics, sys
by = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+)-(\d+): ([\d.]+) s", line)
    if m: by.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
base = statistics.median(by["oneround"].values())
for s in ("oneround", "signed"):
    med = statistics.median(by[s].values())
    print(f"{s:9s} median {med:.2f} s  ratio {med / base:.3f}")
rounds = [r for r in by["signed"] if r in by["oneround"]]
print(f"median over rounds of each round's ratio: {statistics.median(by['signed'][r] / by['oneround'][r] for r in rounds):.3f}")
PY
