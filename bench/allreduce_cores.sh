#!/usr/bin/env bash
# The all-reduce with a core per rank, for a host with at least RANKS + 2
# cores (a lent GPU machine has 16): ROUNDS rounds (default 3), each running
# every variant once, so that they alternate; then the median time per
# (variant, provider, algorithm, size) over rounds.
#   bench/allreduce_cores.sh                # 4 ranks, 256 KiB .. 16 MiB
#   RANKS=8 ROUNDS=5 bench/allreduce_cores.sh
# Variants (docs/libfabric.md, "Rendezvous above 16 KiB" and "Progress and
# waiting"):
#   default         the transport as nodes run it (over tcp;ofi_rxm: rxm's
#                   eager mode, no rendezvous up to 1 MiB)
#   no-backoff      waits spin 5 ms before they sleep, the progress thread
#                   sleeps at most 10 us
#   rxm-rendezvous  rxm's own protocols (--rxm-eager-limit 0): rendezvous
#                   above 16 KiB
# FIT=1 then fits `auto` to this host: every algorithm and `auto` over both
# providers, alternated size by size for ROUNDS rounds (`bench allreduce
# --rounds --fit-crossovers`, 16 KiB .. 16 MiB, at least 2 rounds), printing auto against the
# best per size and the [exchange.crossovers] tables that would make it pick
# the best (the defaults in collective_options.cc come from such tables).
# Needs ./build (scripts/build.sh); CHORUS=path overrides the binary.
set -u
cd "$(dirname "$0")/.."
chorus=${CHORUS:-./build/chorus}
ranks=${RANKS:-4}
out=$(mktemp -d)
cores=$(nproc)
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores, $ranks ranks, $(date -u +%F)"
[ "$cores" -ge $((ranks + 2)) ] || echo "# warning: fewer than RANKS + 2 cores: the ranks share cores and the figures rank the scheduler"
for round in $(seq "${ROUNDS:-3}"); do
  for variant in default no-backoff rxm-rendezvous; do
    extra=()
    case $variant in
      no-backoff) extra=(--wait-spin-us 5000 --progress-max-sleep-us 10) ;;
      rxm-rendezvous) extra=(--rxm-eager-limit 0) ;;
    esac
    providers='tcp;ofi_rxm,net'
    [ "$variant" = rxm-rendezvous ] && providers='tcp;ofi_rxm'
    timeout 600 "$chorus" bench allreduce --ranks "$ranks" --provider "$providers" \
      --algorithms ring,halving-doubling,auto --min-size 262144 --max-size 16777216 \
      --seconds 0.5 --warmup 0.5 "${extra[@]}" > "$out/$variant-$round.txt" 2>&1 ||
      echo "# $variant round $round failed: $(tail -1 "$out/$variant-$round.txt")"
    # Each run's lines as it ends (commented), so that a run cut short keeps them.
    grep -E '^# provider |^ *[0-9]+ .* float ' "$out/$variant-$round.txt" | sed "s/^/# $variant round $round: /"
  done
done
python3 - "$out" <<'PYEOF'
import collections, glob, os, statistics, sys
times = collections.defaultdict(list)
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.txt"))):
    variant = os.path.basename(path).rsplit("-", 1)[0]
    provider = "?"
    for line in open(path):
        if line.startswith("# provider "):
            provider = line.split()[2]
        f = line.split()
        if len(f) >= 9 and f[0].isdigit() and f[2] == "float":
            times[(variant, provider, f[3], int(f[0]))].append(float(f[5]))
print("%-14s %-12s %-17s %9s %10s  %s" % ("variant", "provider", "algorithm", "size", "median_us", "rounds"))
for key in sorted(times, key=lambda k: (k[1], k[3], k[2], k[0])):
    v = times[key]
    print("%-14s %-12s %-17s %9d %10.1f  %s" % (key[0], key[1], key[2], key[3], statistics.median(v),
                                               " ".join("%.0f" % x for x in v)))
PYEOF
if [ "${FIT:-0}" = 1 ]; then
  echo "# auto against the best, and the fitted crossovers, with a core per rank"
  fit_rounds=$(( ${ROUNDS:-3} < 2 ? 2 : ${ROUNDS:-3} ))  # alternated: medians of at least two
  timeout 900 "$chorus" bench allreduce --ranks "$ranks" --provider 'tcp;ofi_rxm,net' \
    --algorithms ring,tree,halving-doubling,recursive-doubling,auto --min-size 16384 --max-size 16777216 \
    --rounds "$fit_rounds" --seconds 0.25 --warmup 0.5 --fit-crossovers > "$out/fit.txt" 2>&1 ||
    echo "# the fit failed: $(tail -1 "$out/fit.txt")"
  awk '/median time \(us\) over|^# \[exchange.crossovers\] fitted|^# no crossovers/ {p = 1} p {print} /^$/ {p = 0}' \
    "$out/fit.txt"
fi
