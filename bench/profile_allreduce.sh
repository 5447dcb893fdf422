#!/usr/bin/env bash
# Where an all-reduce's time goes: runs `chorus bench allreduce` for one size,
# algorithm and provider under `perf record -a` (every CPU, all processes) and
# splits the samples of the rank processes into what they were doing: the
# kernel's payload copies (socket send and receive, or shm's cross-process
# copies), the reduction (chorus's AddFloats / AddHalves), the rest of the
# kernel (TCP/IP stack, scheduling, syscalls), libfabric, the rest of chorus,
# and the share of the machine the ranks did not use (idle, other processes).
#   bench/profile_allreduce.sh                      # net, 4 ranks, 16 MiB, ring
#   PROVIDER='tcp;ofi_rxm' RANKS=2 SIZE=1MiB ALGORITHM=halving-doubling bench/profile_allreduce.sh
# Needs ./build (scripts/build.sh) and perf (Debian: linux-perf), run as root or
# with kernel.perf_event_paranoid <= 0. Run nothing else at the same time.
set -eu
cd "$(dirname "$0")/.."
provider=${PROVIDER:-net}
ranks=${RANKS:-4}
size=${SIZE:-16MiB}
algorithm=${ALGORITHM:-ring}
seconds=${SECONDS_PER_ROW:-6}
command -v perf > /dev/null || { echo "profile_allreduce: perf not found (apt-get install linux-perf)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

./build/chorus bench allreduce --ranks "$ranks" --provider "$provider" --min-size "$size" \
  --max-size "$size" --algorithms "$algorithm" --warmup 1 --seconds "$seconds" > "$work/bench.txt" 2>&1 &
bench=$!
# Record the middle of the float32 row: after the processes started and warmed
# up, before the float16 row.
sleep 2
perf record -a -o "$work/perf.data" -- sleep "$((seconds / 2))" > /dev/null 2>&1
wait "$bench" || { cat "$work/bench.txt"; exit 1; }
grep -E "^#|float" "$work/bench.txt" | grep -v half
echo "(timed while perf recorded: slower than without it)"
# The rank processes run /proc/self/exe (comm "exe"); every other comm counts
# as "not the ranks" (idle is the swapper).
perf report -i "$work/perf.data" --no-children --sort comm,dso,symbol -g none --stdio \
    -F overhead,comm,dso,symbol 2> /dev/null | /usr/bin/python3 -c '
import re, sys
cats = {}
order = ["kernel payload copies", "reduction", "kernel other (TCP/IP, scheduling, syscalls)",
         "libfabric", "libc (memcpy, locks, malloc)", "chorus other", "other dso",
         "not the ranks (idle, other processes)"]
for line in sys.stdin:
    m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+(\S+)\s+\[(.)\]\s+(.*\S)", line)
    if not m: continue
    pct, comm, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(5)
    if comm != "exe": c = order[7]
    elif kind == "k" and re.search(r"copy_(to|from)_iter|copy_user|copy_page|memcpy|memmove|process_vm", sym): c = order[0]
    elif re.search(r"AddFloats|AddHalves|AddInto", sym): c = order[1]
    elif kind == "k": c = order[2]
    elif "libfabric" in dso: c = order[3]
    elif dso.startswith("libc") or "libpthread" in dso: c = order[4]
    elif dso == "chorus": c = order[5]
    else: c = order[6]
    cats[c] = cats.get(c, 0.0) + pct
print("share of all CPU samples (%d cores), perf record -a over the float32 row:" % __import__("os").cpu_count())
for c in order:
    print("  %-46s %5.1f%%" % (c, cats.get(c, 0.0)))
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 8 and f[2] == "float":
        # busbw is what one rank sends per second; all of them together move n x that.
        print("all %s ranks together moved %.2f GB/s of payload (n x busbw): compare with one "
              "fi_pingpong stream" % (sys.argv[2], int(sys.argv[2]) * float(f[7])))
' "$work/bench.txt" "$ranks"
