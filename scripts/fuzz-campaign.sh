#!/usr/bin/env bash
# The property tests over what the host parses from others (transcripts
# for `wasmctrl replay`, OCI manifests and configs from registries,
# WasmReconciler specs), run with many more cases than CI gives them.
#
#   scripts/fuzz-campaign.sh            # 20 000 cases per property
#   PROPTEST_CASES=100000 scripts/fuzz-campaign.sh
#
# Prints one row per property (cases, seconds, result) and exits non-zero
# if any failed; a failure's minimal input is in the output and in
# host/proptest-regressions/.
set -euo pipefail

cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-20000}"

properties=(
    ops::transcript::fuzz::any_bytes_are_read_or_refused
    ops::transcript::fuzz::any_json_is_read_or_refused
    ops::transcript::fuzz::any_mutated_transcript_file_is_read_or_refused
    ops::source::artifact::tests::properties::any_bytes_are_a_manifest_only_if_well_formed
    ops::source::artifact::tests::properties::any_json_is_a_manifest_only_if_well_formed
    ops::source::artifact::tests::properties::a_mutated_manifest_is_accepted_only_if_well_formed
    ops::source::artifact::tests::properties::any_config_blob_is_json_or_refused
    ops::manager::objects::spec::spec_fuzz::any_json_spec_is_a_plugin_config_or_refused
    ops::manager::objects::spec::spec_fuzz::a_mutated_spec_is_a_plugin_config_or_refused
    ops::manager::objects::spec::spec_fuzz::any_object_name_is_a_plugin_name_or_refused
)

# The test binary itself, so the times are the tests' and a build started
# by an edit elsewhere in the tree does not land in them.
binary=$(cargo test -q -p wasmctrl --lib --no-run --message-format=json \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
failed=0
total_cases=0
started=$(date +%s.%N)
printf '%-86s %8s %9s  %s\n' property cases seconds result
for p in "${properties[@]}"; do
    t0=$(date +%s.%N)
    if (cd host && "$binary" --exact "$p") >"$log" 2>&1; then
        result=ok
        if ! grep -q '1 passed' "$log"; then
            result='NOT FOUND'
            failed=1
        fi
    else
        result=FAILED
        failed=1
    fi
    t1=$(date +%s.%N)
    printf '%-86s %8d %9.1f  %s\n' "$p" "$PROPTEST_CASES" "$(awk "BEGIN { print $t1 - $t0 }")" "$result"
    if [ "$result" = FAILED ]; then
        grep -E 'Test failed|minimal failing input|panicked|overflow' "$log" | cut -c1-400 || true
    fi
    total_cases=$((total_cases + PROPTEST_CASES))
done
printf '%d properties, %d cases, %.0f s\n' "${#properties[@]}" "$total_cases" \
    "$(awk "BEGIN { print $(date +%s.%N) - $started }")"
exit "$failed"
