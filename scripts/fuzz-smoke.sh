#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time and reports its speed.
#
#   scripts/fuzz-smoke.sh [SECONDS]      # per target; default $FUZZ_SECONDS or 20
#
# Needs a nightly toolchain (`cargo +nightly`); without one it prints a skip
# message and exits 0. Installs cargo-fuzz (`cargo install cargo-fuzz --locked`)
# if nightly is present but cargo-fuzz is not. Fails if any target fails to
# build or crashes; the crashing input is left under fuzz/artifacts/<target>/.
# New corpus entries land in fuzz/corpus/<target>/ (git keeps only seed-*).
set -euo pipefail

seconds="${1:-${FUZZ_SECONDS:-20}}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz-smoke: seconds must be a positive integer, got '$seconds'" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/fuzz"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz-smoke: skipped: no nightly toolchain (cargo +nightly) available"
    exit 0
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

cd "$root"
echo "fuzz-smoke: building all targets ($(cargo +nightly fuzz --version))"
cargo +nightly fuzz build --fuzz-dir "$fuzz_dir"

mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir "$fuzz_dir")
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "fuzz-smoke: no fuzz targets found in $fuzz_dir" >&2
    exit 1
fi

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

failed=()
printf '%-16s %12s %16s  %s\n' target "exec/s" executions result
for target in "${targets[@]}"; do
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
    printf '%-16s %12s %16s  %s\n' "$target" "${rate:-?}" "${execs:-?}" "$result"
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
echo "fuzz-smoke: all ${#targets[@]} targets ran ${seconds}s each without a crash"
