#!/usr/bin/env bash
# Where a `throughput` controller's CPU goes, per reconcile: builds the
# bench with frame pointers (its own cargo target, so the release build is
# left alone), records every process of one run with `perf record -a -g`,
# and puts each controller process's samples in buckets
# (scripts/profile_buckets.py). Run by hand; not a CI step.
#
#   scripts/profile-throughput.sh                  # wasm, 10,000 objects, 2 rounds
#   VARIANT=native scripts/profile-throughput.sh
#
# Needs perf (Debian: linux-perf) and permission to use it system-wide
# (root, or kernel.perf_event_paranoid <= -1). Figures go to $OUT (default
# target/profile/<timestamp>/): perf.data, perf.txt, buckets.txt.
# RECONCILES (default 12,200: about what one 10,000-object round's controller
# runs over its life, docs/BENCHMARKS.md, `throughput`) turns samples into µs.
set -euo pipefail
cd "$(dirname "$0")/.."

VARIANT=${VARIANT:-wasm}
OBJECTS=${OBJECTS:-10000}
ROUNDS=${ROUNDS:-2}
HZ=${HZ:-5000}
RECONCILES=${RECONCILES:-12200}
target="${CARGO_TARGET_DIR:-$PWD/target}-fp"
OUT=${OUT:-target/profile/$(date -u +%Y%m%dT%H%M%SZ)}

command -v perf >/dev/null || { echo "error: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
mkdir -p "$OUT"
CARGO_TARGET_DIR="$target" RUSTFLAGS="-C force-frame-pointers=yes" \
    cargo build --release -p wasmctrl-bench
perf record -a -g -F "$HZ" -o "$OUT/perf.data" -- \
    "$target/release/wasmctrl-bench" throughput --objects "$OBJECTS" --rounds "$ROUNDS" --variants "$VARIANT" \
    | tee "$OUT/throughput.txt"
perf script -i "$OUT/perf.data" -F pid,tid,comm,time,ip,sym > "$OUT/perf.txt" 2>/dev/null
python3 scripts/profile_buckets.py "$OUT/perf.txt" --hz "$HZ" --reconciles "$RECONCILES" | tee "$OUT/buckets.txt"
