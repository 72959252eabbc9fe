#!/usr/bin/env bash
# What each test of one test binary costs: every test run alone (one
# thread), its wall time and the CPU time of its process and the processes
# it waited for (toolchains, spawned hosts, kubectl). The suite's run time
# is CPU-bound on 2 cores, so the CPU column is what a cut saves. Run by
# hand; not a CI step. docs/RELIABILITY.md, "The suite's run time", records
# the latest figures.
#
#   scripts/test-costs.sh binary_and_sandbox        # a test target's name
#   scripts/test-costs.sh cluster 20                # the 20 costliest
#   scripts/test-costs.sh wasmctrl                  # the host's unit tests
#
# The binary is built as `cargo test` builds it (the whole workspace, so
# the features are CI's and nothing is rebuilt for this).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET_NAME=${1:?usage: scripts/test-costs.sh TEST_TARGET [TOP]}
TOP=${2:-15}
command -v python3 >/dev/null || { echo "test-costs: python3 is required" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "test-costs: /usr/bin/time is required (Debian: apt-get install time)" >&2; exit 1; }

# The executable and package directory of the named target.
read -r BIN DIR < <(cargo test --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
name = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == name and m["profile"]["test"]:
        print(m["executable"], os.path.dirname(m["manifest_path"]))
        break
' "$TARGET_NAME") || true
[ -n "${BIN:-}" ] || { echo "test-costs: no test target named $TARGET_NAME" >&2; exit 1; }

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cd "$DIR"
"$BIN" --list 2>/dev/null | sed -n 's/: test$//p' > "$OUT/tests"
echo "test-costs: $(wc -l < "$OUT/tests") tests of $TARGET_NAME, one at a time" >&2
failed=0
while read -r t; do
    if ! /usr/bin/time -f "%e %U %S" -o "$OUT/one" "$BIN" --exact "$t" --test-threads 1 \
        > "$OUT/log" 2>&1; then
        echo "test-costs: $t failed" >&2
        failed=1
    fi
    read -r wall user sys < <(tail -1 "$OUT/one")
    echo "$wall $user $sys $t" >> "$OUT/costs"
done < "$OUT/tests"

python3 - "$OUT/costs" "$TOP" <<'EOF'
import sys
rows = []
for line in open(sys.argv[1]):
    wall, user, sys_, name = line.split(maxsplit=3)
    rows.append((float(user) + float(sys_), float(wall), name.strip()))
rows.sort(reverse=True)
cpu = sum(r[0] for r in rows)
print(f"{'CPU s':>8} {'wall s':>8}  test")
for c, w, n in rows[: int(sys.argv[2])]:
    print(f"{c:8.1f} {w:8.1f}  {n}")
print(f"{cpu:8.1f} {sum(r[1] for r in rows):8.1f}  all {len(rows)} tests")
EOF
exit $failed
