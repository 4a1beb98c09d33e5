#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ within one total time budget and reports
# each target's speed.
#
#   scripts/fuzz-smoke.sh [TOTAL_SECONDS]   # default $FUZZ_BUDGET or 120
#
# The budget is the fuzzing time of all targets together, split evenly between
# them (at least 1 s each); building them comes on top.
#
# It never skips silently. Without a nightly toolchain (`cargo +nightly`), or when
# cargo-fuzz is missing and cannot be installed (`cargo install cargo-fuzz
# --locked`), it FAILS with exit 3. Only LATCH_FUZZ=skip skips it, and then it
# prints a `fuzz-smoke: SKIPPED` summary line. It fails too if a target does not
# build or crashes; the crashing input is left under fuzz/artifacts/<target>/.
# New corpus entries land in fuzz/corpus/<target>/ (git keeps only seed-*).
set -euo pipefail

budget="${1:-${FUZZ_BUDGET:-120}}"
if ! [[ "$budget" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz-smoke: the total budget must be a positive number of seconds, got '$budget'" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/fuzz"

case "${LATCH_FUZZ:-run}" in
run) ;;
skip)
    count="$(grep -c '^\[\[bin\]\]' "$fuzz_dir/Cargo.toml" || true)"
    echo "fuzz-smoke: SKIPPED (LATCH_FUZZ=skip): none of the ${count} fuzz targets ran"
    exit 0
    ;;
*)
    echo "fuzz-smoke: LATCH_FUZZ must be 'run' or 'skip', got '${LATCH_FUZZ}'" >&2
    exit 2
    ;;
esac

unavailable() {
    echo "fuzz-smoke: FAILED: $1; no fuzz target ran." >&2
    echo "fuzz-smoke: install it, or set LATCH_FUZZ=skip to skip the fuzz smoke on purpose" >&2
    exit 3
}

if ! cargo +nightly --version >/dev/null 2>&1; then
    unavailable "no nightly toolchain (cargo +nightly)"
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz"
    if ! cargo install cargo-fuzz --locked; then
        unavailable "cargo-fuzz is missing and could not be installed"
    fi
fi

cd "$root"
echo "fuzz-smoke: building all targets ($(cargo +nightly fuzz --version))"
cargo +nightly fuzz build --fuzz-dir "$fuzz_dir"

mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir "$fuzz_dir")
count=${#targets[@]}
if [[ $count -eq 0 ]]; then
    echo "fuzz-smoke: FAILED: no fuzz targets found in $fuzz_dir" >&2
    exit 1
fi

# The budget split evenly, the remainder to the first targets; at least 1 s each
# (so a budget below the number of targets runs each for 1 s).
share=$((budget / count))
extra=$((budget % count))
if [[ $share -eq 0 ]]; then
    share=1
    extra=0
fi

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

failed=()
spent=0
echo "fuzz-smoke: ${budget}s across ${count} targets"
printf '%-16s %8s %12s %16s  %s\n' target seconds "exec/s" executions result
for i in "${!targets[@]}"; do
    target="${targets[$i]}"
    seconds=$share
    if [[ $i -lt $extra ]]; then
        seconds=$((share + 1))
    fi
    spent=$((spent + seconds))
    log="$logs/$target.log"
    if cargo +nightly fuzz run --fuzz-dir "$fuzz_dir" "$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
        failed+=("$target")
    fi
    # libFuzzer's closing status line ("#N DONE ... exec/s: R ...") and its final
    # stats (-print_final_stats=1); absent if the target crashed early.
    execs="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)"
    rate="$(sed -n '/^#[0-9]*[[:space:]]*DONE/s/.*exec\/s: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)"
    if [[ -z "$rate" ]]; then
        rate="$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)"
    fi
    printf '%-16s %8s %12s %16s  %s\n' "$target" "$seconds" "${rate:-?}" "${execs:-?}" "$result"
    if [[ "$result" != ok ]]; then
        echo "---- $target: the panic and the end of its log ----"
        grep -m 1 -A 3 'panicked at' "$log" || true
        tail -n 30 "$log"
        echo "----"
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz-smoke: FAILED: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz-smoke: all ${count} targets ran without a crash, ${spent}s of fuzzing in total"
