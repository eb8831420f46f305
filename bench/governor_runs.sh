#!/usr/bin/env bash
# Issue 67's measurements, in one hold of the shared lock, most important first; the load
# average (uptime) around each run goes to OUT/uptime.log.
#
#   bench/governor_runs.sh [OUT]   (OUT: default bench/results/governor-DATE)
#
# 1. 5,000 targets every 5 s beside a pinned competitor: governed 300 s, then the sweep of
#    fixed stretches 1, 2, 3, 1.5, 2.5 (90 s each), every process at niceness -5 so that
#    other work on a shared machine takes less of the pinned CPU;
# 2. 2,000 hung targets beside 100 healthy, timeout 1 s, every 1 s and 5 s, five runs each;
# 3. issue 58's results: 6,000 every 1 s (300 s), 1,000 every 5 s, 5,000 every 5 s cut to 1,000.
# A run whose JSON exists already is skipped (rerun a disturbed one by deleting its file).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/results/governor-$(date -u +%F)}"
mkdir -p "$OUT"
export OUT
run() {  # name, then the bench arguments
    local name=$1
    shift
    [[ -s "$OUT/$name.json" ]] && return 0
    echo "== $name start $(date -u +%H:%M:%S) $(uptime)" >>"$OUT/uptime.log"
    timeout 1500 .venv/bin/python -m bench "$@" --json-out "$OUT/$name.json" \
        >"$OUT/$name.out" 2>"$OUT/$name.err" || echo "== $name failed: $?" >>"$OUT/uptime.log"
    echo "== $name end   $(date -u +%H:%M:%S) $(uptime)" >>"$OUT/uptime.log"
}
export -f run
flock /work/heavy.lock bash -c '
set -u
run pinned-governed overload --targets 5000 --interval 5s --reads-every 10 --seconds 300 --nice -5
for s in 1 2 3 1.5 2.5; do
    run "pinned-fixed-$s" overload --targets 5000 --interval 5s --reads-every 10 --seconds 90 \
        --fixed-stretch "$s" --nice -5
done
for i in 1 2 3 4 5; do
    run "hung-1s-$i" starve --hung 2000 --healthy 100 --interval 1s --timeout 1s --seconds 150
    run "hung-5s-$i" starve --hung 2000 --healthy 100 --interval 5s --timeout 1s --seconds 150
done
run unpinned-6000x1s overload --targets 6000 --interval 1s --timeout 1s --no-competitor --no-pin \
    --reads-every 10 --seconds 300
run unpinned-1000x5s overload --targets 1000 --interval 5s --no-competitor --no-pin \
    --reads-every 10 --seconds 240
run unpinned-5000to1000 overload --targets 5000 --interval 5s --no-competitor --no-pin \
    --reads-every 10 --seconds 300 --reduce-to 1000 --reduce-at 120
'
