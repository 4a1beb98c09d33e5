#!/usr/bin/env bash
# latch side by side with the raw PTY, tmux, GNU screen and dtach, in one run on the
# same data (BENCHMARKS.md explains every figure).
#
#   bench/run.sh            # about 10 minutes on 2 cores (5 rounds of every figure, 1,000
#                           # sessions for ls), then prints one table
#   bench/run.sh --quick    # small data, fewer samples per round: about a minute
#
# Installs tmux, screen and dtach with apt-get when they are missing (as root; a peer
# that cannot be installed is skipped with the reason printed), builds latch and the
# helpers in bench/tools in release mode, then runs bench/run.py under a time bound.
# Everything it starts lives in a temporary directory and is stopped, by pid, before
# it exits. Figures only: nothing here is a pass/fail test.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for peer in tmux screen dtach; do
    command -v "$peer" >/dev/null 2>&1 || missing+=("$peer")
done
if ((${#missing[@]})); then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing ${missing[*]} with apt-get..." >&2
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq "${missing[@]}"; } >/tmp/latch-bench-apt.log 2>&1; then
            echo "apt-get failed (see /tmp/latch-bench-apt.log): missing peers are skipped" >&2
        fi
    else
        echo "not root or no apt-get: ${missing[*]} cannot be installed and are skipped" >&2
    fi
fi

echo "building latch and bench/tools (release)..." >&2
cargo build --release --quiet --bin latch
cargo build --release --quiet --manifest-path bench/tools/Cargo.toml

exec timeout --signal=INT 900 python3 bench/run.py "$@"
