#!/usr/bin/env python3
"""Pictures (SPEC §4.4): `peek --format png` (and svg, html) against `peek --plain`
on one coloured 80x24 screen, in one run; and, for the "One binary" rule, the
idle PSS of a daemon and the time of `latch new -d` of the binary given.

    python3 bench/pictures.py [LATCH_BIN] [--no-peek]

Figures only: medians of ROUNDS samples, on a shared 2-core machine. Every daemon
started here lives in a temporary root and is removed (`rm --force`) at the end.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
args = [a for a in sys.argv[1:] if not a.startswith("--")]
LATCH = args[0] if args else os.path.join(REPO, "target", "release", "latch")
PEEK = "--no-peek" not in sys.argv
ROUNDS = 21
IDLE = 10

TMP = tempfile.mkdtemp(prefix="latch-pics-")
ENV = dict(os.environ, LATCH_ROOT=os.path.join(TMP, "root"), SHELL="/bin/sh", HOME=TMP)
for k in ("LATCH_SESSION_ID", "LATCH_INCARNATION", "LATCH_HOST"):
    ENV.pop(k, None)

# A coloured screen: the 16 colours as backgrounds, bold and italic words, a
# 256-colour ramp and a truecolor one, wide characters.
SCRIPT = r"""
read go
printf '\033[H\033[2J'
for i in 0 1 2 3 4 5 6 7; do printf '\033[4%sm  \033[m' $i; done; echo
for i in 0 1 2 3 4 5 6 7; do printf '\033[10%sm  \033[m' $i; done; echo
printf '\033[1;32mbold green\033[m \033[3;33mitalic yellow\033[m \033[4;36munderlined\033[m \033[7minverse\033[m\n'
i=16; while [ $i -lt 88 ]; do printf '\033[48;5;%sm \033[m' $i; i=$((i+1)); done; echo
i=0; while [ $i -lt 72 ]; do printf '\033[48;2;%s;%s;200m \033[m' $((i*3)) $((255-i*3)); i=$((i+1)); done; echo
printf '\xe4\xb8\xad\xe6\x96\x87 wide, e\xcc\x81 combining\n'
i=0; while [ $i -lt 14 ]; do echo "line $i: the quick brown fox jumps over the lazy dog"; i=$((i+1)); done
printf 'READY'; sleep 100000
"""


def latch(*argv, check=True):
    r = subprocess.run([LATCH, *argv], env=ENV, capture_output=True)
    if check and r.returncode != 0:
        sys.exit(f"latch {' '.join(argv)}: {r.returncode} {r.stderr.decode()}")
    return r


def timed(argv, n=ROUNDS):
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        latch(*argv)
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples), min(samples), max(samples)


def pss_kb(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def main():
    created = timed(["new", "-d", "--", "sleep", "100000"], n=IDLE)
    ids = [s["id"] for s in json.loads(latch("--json", "ls").stdout)]
    time.sleep(2)  # idle: the daemons have settled
    pids = [json.loads(latch("--json", "status", i).stdout)["daemonPid"] for i in ids]
    pss = [pss_kb(p) for p in pids]
    print(f"binary: {LATCH} ({os.path.getsize(LATCH)} bytes)")
    print(f"latch new -d: median {created[0]:.1f} ms (min {created[1]:.1f}, max {created[2]:.1f}), {IDLE} creations")
    print(f"idle daemon PSS, {IDLE} sessions: median {statistics.median(pss)} KB (min {min(pss)}, max {max(pss)})")
    for i in ids:
        latch("rm", "--force", i, check=False)
    if PEEK:
        latch("new", "-d", "--id", "pic", "--", "sh", "-c", SCRIPT)
        latch("resize", "pic", "24", "80")
        latch("send", "pic", "go\n")
        latch("peek", "pic", "--wait", "READY")
        out = os.path.join(TMP, "screen")
        rows = [("peek --plain", ["peek", "pic", "--plain"])]
        for fmt in ("svg", "html", "png"):
            rows.append((f"peek --format {fmt}", ["peek", "pic", "--format", fmt, "--out", f"{out}.{fmt}"]))
        # Interleaved rounds, so each format sees the same minute of the machine.
        samples = {name: [] for name, _ in rows}
        for _ in range(ROUNDS):
            for name, argv in rows:
                t = time.perf_counter()
                latch(*argv)
                samples[name].append((time.perf_counter() - t) * 1000)
        plain = statistics.median(samples["peek --plain"])
        for name, _ in rows:
            s = samples[name]
            m = statistics.median(s)
            print(f"{name}: median {m:.1f} ms (min {min(s):.1f}, max {max(s):.1f}), {m / plain:.1f}x plain")
        print(f"sizes: svg {os.path.getsize(out + '.svg')} B, html {os.path.getsize(out + '.html')} B, png {os.path.getsize(out + '.png')} B")
        latch("rm", "--force", "pic", check=False)


if __name__ == "__main__":
    main()
