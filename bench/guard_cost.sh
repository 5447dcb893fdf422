#!/usr/bin/env bash
# What the data plane's guards cost: sealing (fabric.authenticate,
# fabric.encrypt) and the contribution check (exchange.poison_check).
# ROUNDS rounds (default 3), each running every setting once so that they
# alternate, of
#   - a NODES-node (default 4) ring all-reduce training run
#     (configs/allreduce-ring.toml, EPOCHS epochs, default 1; NODES=2 on a
#     2-core host gives each node a core): the median of the nodes' train_seconds,
#     under the settings open (neither guard), mac (MACs only), check (the
#     contribution check only), default (both, as shipped) and encrypt
#     (encryption and the check), and on request audit (as shipped, every
#     step audited: exchange.poison_audit_always; 3 nodes or more) and
#     oneround (as shipped, the check's figures gathered in one round:
#     exchange.poison_agreement_up_to = 0; the second round runs at 4 nodes or more);
#   - chorus bench p2p and chorus bench allreduce --ranks 4 at 1 MiB and
#     64 MiB over tcp;ofi_rxm with --seal off, mac and encrypt (only with
#     BENCH=1: a few minutes more).
# then the median per setting and its ratio to "open" ("off" for the benches).
#   bench/guard_cost.sh
#   ROUNDS=5 EPOCHS=3 BENCH=1 bench/guard_cost.sh
#   NODES=2 MODEL=cnn-bn SETTINGS="open mac" bench/guard_cost.sh   # a core per node, a longer step
#   SETTINGS="open default audit" bench/guard_cost.sh                # what an audited step costs
#   SETTINGS="open oneround default" bench/guard_cost.sh             # what the agreement's second round costs
# MODEL (default the config's mlp) and SETTINGS (default all five) narrow
# the training runs; the table also gives the median over rounds of each
# round's ratio to "open", steadier where the host's speed drifts.
# Needs ./build (scripts/build.sh); CHORUS=path overrides the binary.
set -u
cd "$(dirname "$0")/.."
chorus=${CHORUS:-./build/chorus}
out=$(mktemp -d)
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(date -u +%F), commit $(git rev-parse --short HEAD 2>/dev/null)"
for round in $(seq "${ROUNDS:-3}"); do
  for setting in ${SETTINGS:-open mac check default encrypt}; do
    auth=true; enc=false; check=true; audit=false; agree=32
    case $setting in
      audit) audit=true ;;
      oneround) agree=0 ;;
      open) auth=false; check=false ;;
      mac) check=false ;;
      check) auth=false ;;
      encrypt) enc=true ;;
    esac
    timeout 900 "$chorus" launch -n "${NODES:-4}" configs/allreduce-ring.toml --set train.epochs="${EPOCHS:-1}" \
      --set cluster.min_nodes="${NODES:-4}" --set train.model="\"${MODEL:-mlp}\"" \
      --set fabric.authenticate=$auth --set fabric.encrypt=$enc --set exchange.poison_check=$check \
      --set exchange.poison_audit_always=$audit --set exchange.poison_agreement_up_to=$agree \
      --set run.progress=off --set run.output_dir="$out/train-$setting-$round" > "$out/train-$setting-$round.log" 2>&1 ||
      echo "# training with $setting, round $round failed: $(tail -1 "$out/train-$setting-$round.log")"
  done
  for seal in off mac encrypt; do
    if [ "${BENCH:-0}" = 1 ]; then
      timeout 600 "$chorus" bench p2p --provider 'tcp;ofi_rxm' --min-size 1MiB --max-size 64MiB --seal $seal \
        > "$out/p2p-$seal-$round.txt" 2>&1 || echo "# bench p2p $seal failed"
      timeout 600 "$chorus" bench allreduce --ranks 4 --provider 'tcp;ofi_rxm' --algorithms ring,auto \
        --min-size 1048576 --max-size 67108864 --seal $seal > "$out/allreduce-$seal-$round.txt" 2>&1 ||
        echo "# bench allreduce $seal failed"
    fi
  done
done
python3 - "$out" <<'PYEOF'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
seals = ["off", "mac", "encrypt"]
settings = ["open", "mac", "check", "default", "encrypt", "audit", "oneround"]
def median(xs):
    return statistics.median(xs) if xs else float("nan")
train = {s: [] for s in settings}
for s in settings:
    for run in glob.glob(f"{out}/train-{s}-*/*/"):
        secs = [json.load(open(f))["train_seconds"] for f in glob.glob(f"{run}/node*/summary.json")]
        if secs:
            train[s].append(median(secs))
print(f"{os.environ.get('NODES', '4')}-node ring all-reduce, configs/allreduce-ring.toml: median train_seconds over rounds (ratio to off)")
base = median(train["open"])
paired = {s: [] for s in settings}
for s in settings:
    for f in glob.glob(f"{out}/train-{s}-*"):
        r = f.rsplit("-", 1)[1]
        mine = [json.load(open(x))["train_seconds"] for x in glob.glob(f"{f}/*/node*/summary.json")]
        opened = [json.load(open(x))["train_seconds"] for x in glob.glob(f"{out}/train-open-{r}/*/node*/summary.json")]
        if mine and opened:
            paired[s].append(median(mine) / median(opened))
for s in settings:
    if not train[s]:
        continue
    m = median(train[s])
    print(f"  {s:8s} {m:8.2f} s  x{m / base:.3f}  ({len(train[s])} rounds; median of the rounds' ratios x{median(paired[s]):.3f})")
def rows(kind, pattern, key_cols, value_col):
    table = {}
    for s in seals:
        for f in glob.glob(f"{out}/{kind}-{s}-*.txt"):
            for line in open(f):
                m = re.match(pattern, line)
                if m:
                    table.setdefault(tuple(m.group(c) for c in key_cols), {}).setdefault(s, []).append(float(m.group(value_col)))
    return table
p2p = rows("p2p", r"tcp;ofi_rxm\s+\S+\s+(?P<size>\d+ \w+)\s+\d+\s+(?P<lat>[\d.]+)\s+[\d.]+\s+(?P<bw>[\d.]+)", ["size"], "bw")
if p2p:
    print("bench p2p tcp;ofi_rxm: median GB/s (ratio to off)")
    for key, by in p2p.items():
        print("  " + key[0].rjust(7) + "  " + "  ".join(f"{s} {median(by.get(s, [])):.3f} (x{median(by.get(s, [])) / median(by['off']):.2f})" for s in seals))
PYEOF
for s in off mac encrypt; do
  f=$(ls "$out"/allreduce-$s-*.txt 2>/dev/null | tail -1)
  [ -n "$f" ] && { echo "bench allreduce --ranks 4, seal $s (last round):"; grep -E "^ +[0-9]+ " "$f" | sed 's/^/  /'; }
done
echo "# raw outputs: $out"
