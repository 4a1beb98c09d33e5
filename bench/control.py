#!/usr/bin/env python3
"""Snapshot round trips: `latch control` peek vs `tmux -C` capture-pane vs one
`latch peek` process per snapshot; and requests per second on one control
connection (64 in flight, SPEC §13.6). BENCHMARKS.md has a run.

    python3 bench/control.py [path/to/latch]   # default target/x86_64-unknown-linux-gnu/release/latch
"""

import json
import os
import subprocess
import sys
import tempfile
import time

LATCH = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/x86_64-unknown-linux-gnu/release/latch")
N = int(os.environ.get("N", "2000"))


class Control:
    def __init__(self, root):
        self.p = subprocess.Popen([LATCH, "--root", root, "control"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, bufsize=0)
        self.out = self.p.stdout
        self.i = 0

    def send(self, method, **params):
        self.i += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.i, "method": method,
                                       "params": params}).encode() + b"\n")
        return self.i

    def read(self):
        return json.loads(self.out.readline())

    def call(self, method, **params):
        self.send(method, **params)
        return self.read()["result"]


def main():
    tmp = tempfile.mkdtemp()
    root = os.path.join(tmp, "r")
    c = Control(root)
    c.call("initialize")
    s = c.call("create", command=["sh", "-c", "seq 1 20; exec cat"], rows=24, cols=80)
    ref = f"{s['id']}@{s['incarnation']}"
    c.call("wait", session=ref, text="20", after=0)

    t = time.perf_counter()
    for _ in range(N):
        c.call("peek", session=ref)
    control_us = (time.perf_counter() - t) / N * 1e6

    # Pipelined: up to 64 requests in flight on the one connection.
    t, sent, got = time.perf_counter(), 0, 0
    total = 20000
    while got < total:
        while sent < total and sent - got < 64:
            c.send("peek", session=ref)
            sent += 1
        c.read()
        got += 1
    rps = total / (time.perf_counter() - t)

    t = time.perf_counter()
    for _ in range(200):
        subprocess.run([LATCH, "--root", root, "peek", ref], stdout=subprocess.DEVNULL, check=True)
    peek_us = (time.perf_counter() - t) / 200 * 1e6
    c.call("kill", session=ref)
    c.p.stdin.close()
    c.p.wait()

    sock = os.path.join(tmp, "tmux.sock")
    tm = subprocess.Popen(["tmux", "-S", sock, "-C", "new-session", "-x", "80", "-y", "24",
                           "sh -c 'seq 1 20; exec cat'"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    def tmux_cmd(cmd):
        tm.stdin.write(cmd.encode() + b"\n")
        while True:
            line = tm.stdout.readline()
            if line.startswith(b"%end") or line.startswith(b"%error"):
                return

    tmux_cmd("display-message -p ok")
    t = time.perf_counter()
    for _ in range(N):
        tmux_cmd("capture-pane -p")
    tmux_us = (time.perf_counter() - t) / N * 1e6
    subprocess.run(["tmux", "-S", sock, "kill-server"], check=False)

    print(f"snapshot round trip, 80x24: latch control peek {control_us:.0f} µs, "
          f"tmux -C capture-pane {tmux_us:.0f} µs, one `latch peek` process {peek_us:.0f} µs")
    print(f"requests per second on one control connection (peek, 64 in flight): {rps:.0f}")


if __name__ == "__main__":
    main()
