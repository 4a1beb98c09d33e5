#!/usr/bin/env python3
"""Robustness figures for SPEC.md §8 (figures only; nothing here passes or fails).

    python3 bench/robustness.py [--latch PATH] [--rounds N]

1. The burst reproduction: a session prints 70 MB of 70-byte lines while
   `latch attach` runs on a real terminal (`script`), N rounds: how often the
   client was cut off, and the daemon's peak PSS during the burst.
2. The daemon's peak PSS with one SIGSTOPped attached client during a 70 MB burst.
3. The daemon's peak PSS with 8 clients flooding PINGs without reading.

Everything runs in a temporary root and is killed before exit.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

BURST = (
    "read go; yes 0123456789012345678901234567890123456789012345678901234567890123456789"
    " | head -n 1000000; echo BURST-DONE; sleep 600"
)


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


class Sampler(threading.Thread):
    """Samples a pid's PSS every 10 ms until stopped; keeps the peak."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, pss_kb(self.pid))
            time.sleep(0.01)


class Latch:
    def __init__(self, exe, root):
        self.exe, self.root = exe, root

    def run(self, *args, check=True, env=None):
        r = subprocess.run(
            [self.exe, "--root", self.root, *args],
            capture_output=True,
            text=True,
            env=env,
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"latch {args}: {r.returncode} {r.stderr}")
        return r

    def new(self, sid, script):
        self.run("new", "-d", "--id", sid, "--", "sh", "-c", script)
        return json.loads(self.run("status", sid, "--json").stdout)

    def wait(self, sid, text, timeout=120):
        self.run("peek", sid, "--wait", text, "--timeout", str(timeout))

    def writers(self, sid):
        st = json.loads(self.run("status", sid, "--json").stdout)
        return st["daemon"]["writers"] + st["daemon"]["readers"]


def wait_attached(latch, sid, n=1):
    deadline = time.time() + 10
    while latch.writers(sid) < n:
        if time.time() > deadline:
            raise RuntimeError("attach never arrived")
        time.sleep(0.01)


def burst_round(latch, tmp, i):
    sid = f"burst{i}"
    st = latch.new(sid, BURST)
    ts = os.path.join(tmp, f"typescript{i}")
    attach = f"{latch.exe} --root {latch.root} attach {sid}"
    p = subprocess.Popen(
        ["script", "-qfec", attach, ts],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_attached(latch, sid)
    sampler = Sampler(st["daemonPid"])
    sampler.start()
    latch.run("send", sid, "go\n")
    latch.wait(sid, "BURST-DONE")
    # The client has everything once the screen it shows ends in BURST-DONE; the
    # typescript is written by script as it reads.
    deadline = time.time() + 120
    cut = False
    while time.time() < deadline:
        with open(ts, "rb") as f:
            data = f.read()
        if b"cut off" in data:
            cut = True
            break
        if b"BURST-DONE" in data[-4096:]:
            break
        if p.poll() is not None:
            cut = b"BURST-DONE" not in data
            break
        time.sleep(0.05)
    sampler.stop.set()
    sampler.join()
    latch.run("kill", sid, "--signal", "KILL", "--wait", check=False)
    p.wait(timeout=10)
    return cut, sampler.peak


def stopped_client(latch):
    st = latch.new("stopped", BURST)
    p = subprocess.Popen(
        [latch.exe, "--root", latch.root, "attach", "stopped", "--read-only"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    wait_attached(latch, "stopped")
    os.kill(p.pid, signal.SIGSTOP)
    sampler = Sampler(st["daemonPid"])
    sampler.start()
    latch.run("send", "stopped", "go\n")
    latch.wait("stopped", "BURST-DONE")
    sampler.stop.set()
    sampler.join()
    os.kill(p.pid, signal.SIGCONT)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    latch.run("kill", "stopped", "--signal", "KILL", "--wait", check=False)
    return sampler.peak


def ping_floods(latch, n=8, seconds=5):
    st = latch.new("pings", "sleep 600")
    sock_path = os.path.join(latch.root, "pings.sock")
    magic = bytes([0x89, 0x4C, 0x41, 0x54, 0x43, 0x48, 0x0D, 0x0A])
    # HELLO{versions 2..=2, client ""} and PING(7), postcard in u32 BE frames.
    hello = bytes([0, 2, 2, 0])
    ping = bytes([9, 7])

    def frame(p):
        return struct.pack(">I", len(p)) + p

    socks = []
    sampler = Sampler(st["daemonPid"])
    sampler.start()
    sent = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_path)
        s.sendall(magic + frame(hello))
        s.setblocking(False)
        socks.append(s)
        sent.append(0)
    block = frame(ping) * 8192
    end = time.time() + seconds
    while time.time() < end:
        for i, s in enumerate(socks):
            try:
                sent[i] += s.send(block)
            except BlockingIOError:
                pass
        time.sleep(0.001)
    status = latch.run("status", "pings", check=False).returncode
    sampler.stop.set()
    sampler.join()
    for s in socks:
        s.close()
    latch.run("kill", "pings", "--signal", "KILL", "--wait", check=False)
    return sampler.peak, sent, status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latch", default="target/x86_64-unknown-linux-gnu/release/latch")
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="latch-robust-")
    root = os.path.join(tmp, "root")
    latch = Latch(os.path.abspath(a.latch), root)
    try:
        cuts, peaks = 0, []
        for i in range(a.rounds):
            cut, peak = burst_round(latch, tmp, i)
            cuts += cut
            peaks.append(peak)
            print(f"burst round {i + 1}: cut off={cut} daemon peak PSS={peak / 1024:.1f} MB", flush=True)
        print(f"burst: {cuts} of {a.rounds} rounds cut off; daemon peak PSS "
              f"max {max(peaks) / 1024:.1f} MB, median {sorted(peaks)[len(peaks) // 2] / 1024:.1f} MB")
        peak = stopped_client(latch)
        print(f"one SIGSTOPped attached client, 70 MB burst: daemon peak PSS {peak / 1024:.1f} MB")
        peak, sent, status = ping_floods(latch)
        print(f"8 PING-flooding clients for 5 s: daemon peak PSS {peak / 1024:.1f} MB; "
              f"bytes each got in before the daemon stopped reading: {min(sent)}..{max(sent)}; "
              f"status meanwhile exit {status}")
    finally:
        subprocess.run(["pkill", "-KILL", "-f", root], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
