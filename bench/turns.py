#!/usr/bin/env python3
"""Turns for tools (SPEC §4.7): `latch run REF -- true` round trip against tmux
send-keys + polling capture-pane for a marker, and `latch wait --idle` accuracy
(the time from the program's last output, by the daemon's clock, to the wait's
return, less the idle duration). Usage: bench/turns.py [LATCH] [N]."""
import json, os, subprocess, sys, tempfile, time

LATCH = sys.argv[1] if len(sys.argv) > 1 else "target/x86_64-unknown-linux-gnu/release/latch"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 50
root = tempfile.mkdtemp(prefix="lbench")
env = dict(os.environ, LATCH_ROOT=os.path.join(root, "r"), HOME=root)


def latch(*args, check=True):
    r = subprocess.run([LATCH, *args], env=env, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"latch {args}: {r.returncode} {r.stderr}")
    return r


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def show(name, xs):
    print(f"{name}: n={len(xs)} p50={pct(xs, 50):.2f} ms p99={pct(xs, 99):.2f} ms")


latch("new", "-d", "--id", "b", "--", "bash")
latch("run", "b", "--timeout", "30", "true")  # the prompt is up
runs = []
for _ in range(N):
    t = time.perf_counter()
    latch("run", "b", "--", "true")
    runs.append((time.perf_counter() - t) * 1000)
show("latch run b -- true", runs)

sock = os.path.join(root, "tmux.sock")
tmux = ["tmux", "-S", sock, "-f", "/dev/null"]
subprocess.run(tmux + ["new-session", "-d", "-s", "t", "-x", "120", "-y", "40", "bash", "--norc"], env=env, check=True)
time.sleep(0.5)
polls = []
for i in range(N):
    mark = f"MARK-{i}-DONE"
    t = time.perf_counter()
    subprocess.run(tmux + ["send-keys", "-t", "t", f"true; echo MARK-{i}-''DONE", "Enter"], check=True)
    while True:
        out = subprocess.run(tmux + ["capture-pane", "-p", "-t", "t"], capture_output=True, text=True).stdout
        if any(l.strip() == mark for l in out.splitlines()):
            break
    polls.append((time.perf_counter() - t) * 1000)
show("tmux send-keys + capture-pane polling", polls)
subprocess.run(tmux + ["kill-server"])

latch("new", "-d", "--id", "q", "--", "sh", "-c", "while read x; do echo out; done")
late = []
for _ in range(N):
    latch("send", "q", "--submit", "--wait-text", "out", "x")
    latch("wait", "q", "--idle", "200ms", "--timeout", "10")
    back = time.time() * 1000
    st = json.loads(latch("--json", "status", "q").stdout)
    late.append(back - st["lastOutputAt"] - 200)
show("wait --idle 200ms: return after last output + 200 ms", late)
latch("kill", "b", check=False)
latch("kill", "q", check=False)
