#!/usr/bin/env bash
# How long a kill -9 costs the survivors, with the config's own (default)
# cluster timeouts: launches 4 nodes of CONFIG, kills node3 two seconds into
# training, and prints the seconds from the kill until node0 installs the
# epoch without it and until node0 logs training progress again. ROUNDS runs.
#   bench/kill_recovery.sh [CONFIG]        # default configs/allreduce-ring.toml
#   CHORUS=/path/to/other/chorus bench/kill_recovery.sh   # another build, side by side
#   SIGNAL=TERM bench/kill_recovery.sh     # a stop instead: node3 checkpoints and
#                                          # leaves saying it stops (default KILL);
#                                          # under all-reduce it first waits about
#                                          # 1 s at the stop barrier (run_node.cc)
# Needs ./build (scripts/build.sh). Runs 30 epochs per round and stops them
# once the figures are in (or after 60 s).
set -u
cd "$(dirname "$0")/.."
source bench/launched_node.sh
config=${1:-configs/allreduce-ring.toml}
chorus=${CHORUS:-./build/chorus}
rounds=${ROUNDS:-3}
signal=${SIGNAL:-KILL}
now() { date +%s.%N; }
for round in $(seq 1 "$rounds"); do
  out=$(mktemp -d)
  log=$out/log.txt
  "$chorus" launch -n 4 "$config" --set "run.output_dir=\"$out\"" --set train.epochs=30 > "$log" 2>&1 &
  launch=$!
  for _ in $(seq 1 600); do grep -q '\[node3\].*epoch 1/' "$log" && break; sleep 0.1; done
  sleep 2
  victim=$(launched_node_pid "$launch" node3)
  if [ -z "$victim" ]; then echo "round $round: node3 not found (see $log)"; kill -TERM "$launch"; continue; fi
  killed=$(now)
  kill -"$signal" "$victim"
  epoch="" resumed=""
  for _ in $(seq 1 3000); do
    if [ -z "$epoch" ] && grep -q '\[node0\].*epoch 1: members' "$log"; then epoch=$(now); fi
    if [ -n "$epoch" ] && sed -n '/\[node0\].*epoch 1: members/,$p' "$log" | grep -q '\[node0\].*\[trainer\] epoch'; then
      resumed=$(now)
      break
    fi
    sleep 0.02
  done
  since() { if [ -n "$1" ]; then echo "$1 $killed" | awk '{ printf "%.2f s", $1 - $2 }'; else echo "(none in 60 s)"; fi; }
  echo "round $round (SIG$signal): epoch without node3 after $(since "$epoch"), training again after $(since "$resumed")"
  kill -TERM "$launch" 2>/dev/null
  wait "$launch" 2>/dev/null
  rm -rf "$out"
done
