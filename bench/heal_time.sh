#!/usr/bin/env bash
# Heal time of a frozen node, with the config's own (default) cluster
# timeouts: launches 3 nodes of CONFIG, freezes node2 (SIGSTOP) for FREEZE_S
# seconds (default 8, past cluster.dead_timeout_s, so the others remove it),
# continues it (SIGCONT), and prints the seconds from SIGCONT until node2
# rejoins as a new process, receives the live state, and logs its next
# trained step. ROUNDS runs (default 5), then the median of each.
#   bench/heal_time.sh [CONFIG] [--set key=value ...]   # default configs/allreduce-ring.toml
#   bench/heal_time.sh configs/gossip-ring.toml --set exchange.protocol=\"pairwise-async\"
#   CHORUS=/path/to/other/chorus bench/heal_time.sh      # another build, side by side
# Needs ./build (scripts/build.sh). Runs 40 epochs per round and stops them
# once the figures are in (or after 90 s).
set -u
cd "$(dirname "$0")/.."
source bench/launched_node.sh
config=configs/allreduce-ring.toml
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then config=$1; shift; fi
chorus=${CHORUS:-./build/chorus}
rounds=${ROUNDS:-5}
freeze=${FREEZE_S:-8}
now() { date +%s.%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "none"; else printf "%.2f s", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
rejoins=() states=() steps=()
for round in $(seq 1 "$rounds"); do
  out=$(mktemp -d)
  log=$out/log.txt
  "$chorus" launch -n 3 "$config" --set "run.output_dir=\"$out\"" --set train.epochs=40 \
    --set 'run.progress="lines"' --set train.log_every_steps=1 "$@" > "$log" 2>&1 &
  launch=$!
  for _ in $(seq 1 600); do grep -q '\[node2\].*\[trainer\] epoch 1/' "$log" && break; sleep 0.1; done
  sleep 2
  victim=$(launched_node_pid "$launch" node2)
  if [ -z "$victim" ]; then echo "round $round: node2 not found (see $log)"; kill -TERM "$launch"; continue; fi
  kill -STOP "$victim"
  sleep "$freeze"
  continued=$(now)
  marker=$(wc -l < "$log")
  kill -CONT "$victim"
  rejoin="" state="" step=""
  for _ in $(seq 1 4500); do
    tail -n +"$((marker + 1))" "$log" > "$out/after.txt"
    if [ -z "$rejoin" ] && grep -q '\[node2\].*rejoining the cluster as a new process' "$out/after.txt"; then rejoin=$(now); fi
    if [ -z "$state" ] && grep -q '\[node2\].*received the live state' "$out/after.txt"; then state=$(now); fi
    if [ -n "$state" ] && sed -n '/\[node2\].*received the live state/,$p' "$out/after.txt" |
         grep -q '\[node2\].*\[trainer\] epoch'; then
      step=$(now)
      break
    fi
    sleep 0.02
  done
  since() { if [ -n "$1" ]; then echo "$1 $continued" | awk '{ printf "%.2f", $1 - $2 }'; else echo "none"; fi; }
  echo "round $round: after SIGCONT, rejoining $(since "$rejoin") s, live state $(since "$state") s," \
       "next trained step $(since "$step") s"
  [ -n "$rejoin" ] && rejoins+=("$(since "$rejoin")")
  [ -n "$state" ] && states+=("$(since "$state")")
  [ -n "$step" ] && steps+=("$(since "$step")")
  kill -TERM "$launch" 2>/dev/null
  wait "$launch" 2>/dev/null
  rm -rf "$out"
done
echo "median of ${#steps[@]}: rejoining $(printf '%s\n' "${rejoins[@]}" | median)," \
     "live state $(printf '%s\n' "${states[@]}" | median), next trained step $(printf '%s\n' "${steps[@]}" | median)"
