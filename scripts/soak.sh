#!/usr/bin/env bash
# Soak: a steady stream of changes for DURATION seconds against `wasmctrl run`
# (the `mirror` plugin) and a separate embedded API server, with a hot swap of
# the plugin every SWAP_EVERY seconds. Samples the host's RSS and open file
# descriptors every SAMPLE_EVERY seconds, then checks that every object ends
# mirrored (nothing lost) and prints a summary. Run by hand; not a CI step.
#
#   scripts/soak.sh                      # 30 minutes, the defaults below
#   DURATION=300 scripts/soak.sh         # a 5-minute smoke run
#
# Figures go to $OUT (default target/soak/<timestamp>/): samples.csv, the
# host's log and summary.txt. docs/RELIABILITY.md records the latest run.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-1800}
OBJECTS=${OBJECTS:-200}
RATE=${RATE:-5}             # patches per second, spread over the objects
SWAP_EVERY=${SWAP_EVERY:-60}
SAMPLE_EVERY=${SAMPLE_EVERY:-30}
ADMIN_PORT=${ADMIN_PORT:-19490}
PROFILE=${PROFILE:-debug}   # or release
TARGET=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET/soak/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

command -v kubectl >/dev/null || { echo "soak: kubectl is required" >&2; exit 1; }

flag=()
[ "$PROFILE" = release ] && flag=(--release)
cargo build "${flag[@]}" -p wasmctrl -p wasmctrl-apiserver
bin=$TARGET/$PROFILE
"$bin/wasmctrl" build plugins/testing/mirror --out "$OUT/mirror-base.wasm" >/dev/null

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$bin/wasmctrl-apiserver" --addr 127.0.0.1:0 --kubeconfig-out "$OUT/kubeconfig" \
    >"$OUT/apiserver.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$OUT/kubeconfig" ] && break; sleep 0.1; done
export KUBECONFIG=$OUT/kubeconfig
k() { kubectl --request-timeout=10s "$@"; }

# A new digest for each swap: the same component with a custom section
# (id 0, name "soak", payload the swap number) appended.
swap_to() {
    local n=$1 payload name=soak
    payload="$n"
    local size=$((1 + ${#name} + ${#payload}))
    { cat "$OUT/mirror-base.wasm"
      printf "\\x00\\x$(printf %02x "$size")\\x$(printf %02x ${#name})%s%s" "$name" "$payload"
    } >"$OUT/mirror.wasm.tmp"
    mv "$OUT/mirror.wasm.tmp" "$OUT/mirror.wasm"
}
swap_to 0

cat >"$OUT/wasmctrl.yaml" <<YAML
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: { bind: "127.0.0.1:$ADMIN_PORT" }
runtime: { cacheDir: "$OUT/cache" }
plugins:
  - name: mirror
    path: $OUT/mirror.wasm
    maxConcurrentReconciles: 4
    resyncPeriod: 60s
    namespaces: [default]
    permissions:
      - { group: "", resources: [configmaps], verbs: [get, list, watch, patch] }
YAML

for i in $(seq 0 $((OBJECTS - 1))); do
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: soak-%d}\ndata: {value: "0"}\n---\n' "$i"
done | k apply -f - >/dev/null

"$bin/wasmctrl" run --config "$OUT/wasmctrl.yaml" >"$OUT/host.log" 2>&1 &
host=$!
pids+=($host)
admin=127.0.0.1:$ADMIN_PORT
for _ in $(seq 300); do curl -sf "http://$admin/readyz" >/dev/null && break; sleep 0.2; done
curl -sf "http://$admin/readyz" >/dev/null || { echo "soak: the host is not ready; see $OUT/host.log" >&2; exit 1; }

metric() { curl -s "http://$admin/metrics" | awk -v m="$1" 'index($0, m) == 1 { s += $NF } END { print s + 0 }'; }

echo "seconds,rss_kib,fds,reconciles,swaps" >"$OUT/samples.csv"
sample() {
    local t=$1
    echo "$t,$(awk '/VmRSS/ {print $2}' /proc/$host/status),$(ls /proc/$host/fd | wc -l),$(metric 'controller_runtime_reconcile_total{'),$(metric 'wasmctrl_plugin_reloads_total{')" >>"$OUT/samples.csv"
}

start=$(date +%s)
next_sample=0 next_swap=$SWAP_EVERY swaps=0 value=0 patches=0
while :; do
    now=$(( $(date +%s) - start ))
    [ "$now" -ge "$DURATION" ] && break
    if [ "$now" -ge "$next_sample" ]; then sample "$now"; next_sample=$((next_sample + SAMPLE_EVERY)); fi
    if [ "$now" -ge "$next_swap" ]; then swaps=$((swaps + 1)); swap_to "$swaps"; next_swap=$((next_swap + SWAP_EVERY)); fi
    value=$((value + 1))
    writers=()
    for j in $(seq "$RATE"); do
        i=$(( (value * RATE + j) % OBJECTS ))
        k patch configmap "soak-$i" --type merge -p "{\"data\":{\"value\":\"$value\"}}" >/dev/null &
        writers+=($!)
    done
    wait "${writers[@]}" || true
    patches=$((patches + RATE))
    sleep 1
done
sample "$DURATION"

# Nothing lost: every object's label shows its final value.
stale=-1
for _ in $(seq 120); do
    stale=$(k get configmaps -o jsonpath='{range .items[*]}{.data.value}{" "}{.metadata.labels.wasmctrl\.dev/mirror}{"\n"}{end}' \
        | awk '$1 != $2' | wc -l)
    [ "$stale" -eq 0 ] && break
    sleep 1
done

{
    echo "soak: ${DURATION}s, $OBJECTS objects, $patches patches, $swaps hot swaps, profile $PROFILE"
    echo "objects not mirrored at the end: $stale"
    awk -F, 'NR == 2 { next } NR == 3 { r0 = $2; f0 = $3 } NR > 2 { if ($2 > rmax) rmax = $2; if ($3 > fmax) fmax = $3; r = $2; f = $3; n = $4; s = $5 }
        END { printf "RSS KiB: first sample after warm-up %d, last %d, max %d\nFDs: first %d, last %d, max %d\nreconciles %d, plugin reloads %d\n", r0, r, rmax, f0, f, fmax, n, s }' "$OUT/samples.csv"
    echo "samples: $OUT/samples.csv"
} | tee "$OUT/summary.txt"
[ "$stale" -eq 0 ]
