#!/usr/bin/env bash
# Output throughput of one session with a recording on against off, in one run
# (SPEC §4.8): rounds alternate off and on. The program times its own `cat` of
# the data into the terminal, which ends when the daemon has read all but the
# PTY's buffer; no client is attached.
#
#   bench/cast_throughput.sh [MB] [ROUNDS]      (default 50 MB, 5 rounds each)
#
# LATCH names the binary (default target/x86_64-unknown-linux-gnu/release/latch; build it first).
set -euo pipefail
L=${LATCH:-target/x86_64-unknown-linux-gnu/release/latch}
MB=${1:-50}
ROUNDS=${2:-5}
tmp=$(mktemp -d /tmp/castbench.XXXXXX)
root=$tmp/root
cleanup() {
    for id in $("$L" --root "$root" ls --json 2>/dev/null | python3 -c \
        'import json,sys; [print(s["id"]) for s in json.load(sys.stdin)]' 2>/dev/null); do
        "$L" --root "$root" kill "$id" >/dev/null 2>&1 || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
python3 - "$tmp/data" "$MB" <<'EOF'
import random, sys
random.seed(7)
words = "the quick brown fox jumps over a lazy dog latch records every byte".split()
out, size = [], 0
while size < int(sys.argv[2]) * 1_000_000:
    line = " ".join(random.choice(words) for _ in range(random.randint(1, 18)))
    out.append(line)
    size += len(line) + 1
open(sys.argv[1], "w").write("\n".join(out) + "\n")
EOF
bytes=$(stat -c %s "$tmp/data")
run() { # id mode -> MB/s
    local id=$1 mode=$2
    "$L" --root "$root" new -d --id "$id" -- sh -c \
        "read go; s=\$(date +%s%N); cat '$tmp/data'; e=\$(date +%s%N); echo NS=\$((e-s))=; read x" >/dev/null
    if [ "$mode" = on ]; then
        "$L" --root "$root" cast "$id" "$tmp/$id.cast" >/dev/null
    fi
    "$L" --root "$root" send "$id" --keys Enter
    local ns
    ns=$("$L" --root "$root" peek "$id" --wait "=" --timeout 600 | grep -o 'NS=[0-9]*=' | tr -dc 0-9)
    if [ "$mode" = on ]; then
        "$L" --root "$root" cast "$id" --stop >/dev/null
    fi
    "$L" --root "$root" kill "$id" >/dev/null
    python3 -c "print(f'{$bytes / ($ns / 1e9) / 1e6:.1f}')"
}
off=() on=()
for r in $(seq 1 "$ROUNDS"); do
    off+=("$(run "off$r" off)")
    on+=("$(run "on$r" on)")
done
lost=$(cat "$tmp"/on*.cast | grep -c 'bytes lost' || true)
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "data: $bytes bytes; rounds: $ROUNDS each, alternating"
echo "off (MB/s): ${off[*]}  median $(median "${off[@]}")"
echo "on  (MB/s): ${on[*]}  median $(median "${on[@]}")"
echo "recordings with a loss marker: $lost of $ROUNDS; cast sizes: $(du -ch "$tmp"/on*.cast | tail -1 | cut -f1) in all"
