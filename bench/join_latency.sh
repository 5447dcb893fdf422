#!/usr/bin/env bash
# What a node that joins a training cluster costs, started by hand as a user
# would: 3 nodes train (ring all-reduce, CONFIG's model), a 4th `chorus node`
# is started once they are under way. Prints per round:
#   join    seconds from the joiner's start to its first trained step (process
#           start, data loading, join, the wait for the next admission point,
#           the state transfer)
#   pause   how much longer node0's step around the admission took than its
#           median step (the others' training stopped for the joiner)
# and the medians over ROUNDS rounds (default 5), for each MODEL (default
# "mlp cnn-bn").
#   bench/join_latency.sh                  # ./build/chorus
#   MODELS=mlp ROUNDS=3 bench/join_latency.sh
#   CHORUS=/path/to/chorus bench/join_latency.sh
# Needs ./build (scripts/build.sh) and Fashion-MNIST (dataset-fashion-mnist).
set -u
cd "$(dirname "$0")/.."
chorus=${CHORUS:-./build/chorus}
rounds=${ROUNDS:-5}
models=${MODELS:-mlp cnn-bn}
now() { date +%s.%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# "key":value of one metrics line.
field() { grep -o "\"$1\":[-0-9.e+]*" | head -1 | cut -d: -f2; }

echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
for model in $models; do
  joins=$(mktemp) pauses=$(mktemp)
  for round in $(seq 1 "$rounds"); do
    out=$(mktemp -d)
    port=$((10000 + RANDOM % 20000))  # below the ephemeral range (32768 and up)
    sets=(--set "run.output_dir=\"$out\"" --set 'run.name="join"' --set 'run.progress="off"'
          --set "train.model=\"$model\"" --set train.epochs=50 --set train.log_every_steps=1
          --set train.eval_every_epochs=0 --set cluster.min_nodes=3
          --set "cluster.bootstrap=[\"127.0.0.1:$port\"]" --set 'cluster.token="join-bench"')
    pids=()
    for i in 0 1 2; do
      listen="127.0.0.1:0"; [ "$i" = 0 ] && listen="127.0.0.1:$port"
      "$chorus" node configs/allreduce-ring.toml "${sets[@]}" --set "run.node_name=\"node$i\"" \
        --set "cluster.listen=\"$listen\"" > "$out/node$i.log" 2>&1 &
      pids+=($!)
    done
    metrics0=$out/join/node0/metrics.jsonl
    for _ in $(seq 1 600); do [ -f "$metrics0" ] && [ "$(wc -l < "$metrics0")" -ge 30 ] && break; sleep 0.1; done
    started=$(now)
    "$chorus" node configs/allreduce-ring.toml "${sets[@]}" --set 'run.node_name="node3"' \
      --set 'cluster.listen="127.0.0.1:0"' > "$out/node3.log" 2>&1 &
    pids+=($!)
    first=""
    for _ in $(seq 1 3000); do
      if [ -s "$out/join/node3/metrics.jsonl" ]; then first=$(now); break; fi
      sleep 0.02
    done
    sleep 1  # a few more steps on node0 after the admission
    kill -TERM "${pids[@]}" 2>/dev/null
    wait 2>/dev/null
    step=$(grep -o 'admitting node3 before step [0-9]*' "$out/node0.log" | grep -o '[0-9]*$')
    if [ -z "$first" ] || [ -z "$step" ]; then
      echo "$model round $round: node3 did not train (logs in $out)"
      continue
    fi
    join=$(echo "$first $started" | awk '{ printf "%.3f", $1 - $2 }')
    # node0's step intervals: wall_time of step s minus that of step s - 1.
    intervals=$(awk -F'\n' '{ print }' "$metrics0" | while read -r line; do
      s=$(echo "$line" | field step); w=$(echo "$line" | field wall_time); [ -n "$s" ] && [ -n "$w" ] && echo "$s $w"
    done | awk 'NR > 1 { printf "%d %.6f\n", $1, $2 - prev } { prev = $2 }')
    typical=$(echo "$intervals" | awk '{ print $2 }' | median)
    around=$(echo "$intervals" | awk -v s="$step" '$1 == s + 1 || $1 == s + 2 { t += $2 } END { print t + 0 }')
    pause=$(echo "$around $typical" | awk '{ printf "%.3f", $1 - 2 * $2 }')
    echo "$model round $round: join $join s, pause $pause s (node0's median step $(printf '%.4f' "$typical") s, admitted before step $step)"
    echo "$join" >> "$joins"
    echo "$pause" >> "$pauses"
    [ -n "${KEEP:-}" ] && echo "  logs kept in $out" || rm -rf "$out"
  done
  echo "$model: median join $(median < "$joins") s, median pause $(median < "$pauses") s over $(wc -l < "$joins") rounds"
  rm -f "$joins" "$pauses"
done
