#!/usr/bin/env bash
# What a poisoning member costs the others: for each config (default the
# all-reduce, DiLoCo and D-PSGD examples), 4 hand-started nodes train it
# clean, then again with node3 poisoning what it sends from step STEP
# (default 20) on (CHORUS_FAULT_POISON, docs/testing.md: FAULT, default
# x1000@STEP); prints node0's final test accuracy for both, the difference,
# and what the survivors' summary.json says of the poison.
#   bench/poison_accuracy.sh
#   FAULT=nan@20 CONFIGS="allreduce-ring.toml" EPOCHS=5 bench/poison_accuracy.sh
# SETS: more settings for every node, space-separated KEY=VALUE (--set); the
# site average's poisoner, in one site of four:
#   FAULT=x1000@20+site CONFIGS=diloco.toml SETS="exchange.outer.inner=site cluster.site=a" bench/poison_accuracy.sh
# Needs ./build (scripts/build.sh); CHORUS=path overrides the binary.
set -u
cd "$(dirname "$0")/.."
chorus=${CHORUS:-./build/chorus}
out=$(mktemp -d)
step=${STEP:-20}
fault=${FAULT:-x1000@$step}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(date -u +%F), commit $(git rev-parse --short HEAD 2>/dev/null), fault $fault"
run() {  # config, name, fault ("" for none)
  local config=$1 name=$2 poison=$3 port=$((20000 + RANDOM % 20000)) pids=() sets=()
  for set in ${SETS:-}; do sets+=(--set "$set"); done
  for i in 0 1 2 3; do
    local listen=127.0.0.1:0
    [ $i = 0 ] && listen=127.0.0.1:$port
    local env=()
    [ $i = 3 ] && [ -n "$poison" ] && env=(CHORUS_FAULT_POISON="$poison")
    env "${env[@]}" "$chorus" node "configs/$config" --set run.node_name="\"node$i\"" \
      --set run.output_dir="\"$out\"" --set run.name="\"$name\"" --set run.progress='"off"' \
      --set cluster.listen="\"$listen\"" --set cluster.bootstrap="[\"127.0.0.1:$port\"]" \
      --set cluster.min_nodes=4 --set train.epochs="${EPOCHS:-3}" "${sets[@]}" > "$out/$name-node$i.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}" "${pids[1]}" "${pids[2]}"
  kill -9 "${pids[3]}" 2>/dev/null
  wait "${pids[3]}" 2>/dev/null
}
for config in ${CONFIGS:-allreduce-ring.toml diloco.toml gossip-dpsgd-ring.toml}; do
  base=${config%.toml}
  run "$config" "$base-clean" ""
  run "$config" "$base-poisoned" "$fault"
  python3 - "$out" "$base" <<'PYEOF'
import json, sys
out, base = sys.argv[1], sys.argv[2]
def summary(kind, node):
    try:
        return json.load(open(f"{out}/{base}-{kind}/{node}/summary.json"))
    except OSError:
        return None
clean, poisoned = summary("clean", "node0"), summary("poisoned", "node0")
if clean is None or poisoned is None:
    print(f"{base}: a run wrote no summary (logs in {out})")
    sys.exit(0)
a, b = clean["test_accuracy"], poisoned["test_accuracy"]
print(f"{base}: clean {a:.4f} ({clean['world_size']} nodes at the end), poisoned {b:.4f} "
      f"({poisoned['world_size']} nodes), difference {100 * (b - a):+.2f} pp; node0's poison: "
      f"{json.dumps(poisoned.get('poison'))}"
      + (f", site_poison: {json.dumps(poisoned['site_poison'])}" if 'site_poison' in poisoned else ""))
PYEOF
done
echo "# logs and summaries: $out"
