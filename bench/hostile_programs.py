#!/usr/bin/env python3
"""The hostile-program reproductions, re-run against a latch binary:

1. the daemon's PSS after SECONDS of a query flood by a program that never reads;
2. the daemon's RSS after 400 MB of an unterminated OSC;
3. PING round trips while another process holds the session lock and the program
   rings the bell.

Usage: bench/hostile_programs.py LATCH_BINARY [SECONDS]
"""

import fcntl
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

FLOOD = r"""system("stty raw -echo"); $| = 1;
my $q = "\e[>q\e[6n\e[c\e]10;?\a\e]11;?\a\e[18t" x 100;
while (1) { print $q; }"""


def mem_kb(pid, field, path="status"):
    with open(f"/proc/{pid}/{path}") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


class Latch:
    def __init__(self, exe, root):
        self.exe, self.root = exe, root

    def run(self, *args, check=True):
        r = subprocess.run([self.exe, "--root", self.root, *args], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"latch {args}: {r.returncode} {r.stderr}")
        return r

    def new(self, sid, *cmd):
        import json

        return json.loads(self.run("new", "-d", "--json", "--id", sid, "--", *cmd).stdout)


def query_flood(latch, seconds):
    st = latch.new("flood", "perl", "-e", FLOOD)
    pid = st["daemonPid"]
    peak = 0
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(1)
        peak = max(peak, mem_kb(pid, "Pss:", "smaps_rollup"))
    pss = mem_kb(pid, "Pss:", "smaps_rollup")
    latch.run("kill", "flood", "--signal", "KILL", "--wait", check=False)
    return pss, peak


def unterminated_osc(latch, tmp, mb):
    done = os.path.join(tmp, "osc-done")
    script = (
        f"printf '\\033]2;'; head -c {mb * 1000 * 1000} /dev/zero | tr '\\0' x; "
        f": > {done}; exec sleep 600"
    )
    st = latch.new("osc", "sh", "-c", script)
    while not os.path.exists(done):
        time.sleep(0.1)
    latch.run("peek", "osc")
    rss = mem_kb(st["daemonPid"], "VmRSS:")
    latch.run("kill", "osc", "--signal", "KILL", "--wait", check=False)
    return rss


def frame(p):
    return struct.pack(">I", len(p)) + p


def read_frame(s):
    head = b""
    while len(head) < 4:
        head += s.recv(4 - len(head))
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        body += s.recv(n - len(body))
    return body


def ping_under_lock(latch, held):
    sid = "bells-held" if held else "bells-free"
    latch.new(sid, "sh", "-c", "while :; do printf '\\a'; sleep 0.05; done")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.path.join(latch.root, f"{sid}.sock"))
    s.sendall(bytes([0x89, 0x4C, 0x41, 0x54, 0x43, 0x48, 0x0D, 0x0A]) + frame(bytes([0, 2, 2, 0])))
    magic = b""
    while len(magic) < 8:
        magic += s.recv(8 - len(magic))
    read_frame(s)
    lock = open(os.path.join(latch.root, f"{sid}.lock"), "a")
    if held:
        fcntl.flock(lock, fcntl.LOCK_EX)
    rtts = []
    end = time.time() + 5
    while time.time() < end:
        t = time.perf_counter()
        s.sendall(frame(bytes([9, 7])))
        read_frame(s)
        rtts.append((time.perf_counter() - t) * 1000)
        time.sleep(0.01)
    lock.close()
    s.close()
    latch.run("kill", sid, "--signal", "KILL", "--wait", check=False)
    rtts.sort()
    return rtts[len(rtts) // 2], rtts[-1], len(rtts)


def main():
    exe = sys.argv[1]
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    with tempfile.TemporaryDirectory(prefix="lt") as tmp:
        latch = Latch(exe, os.path.join(tmp, "r"))
        pss, peak = query_flood(latch, seconds)
        print(f"query flood for {seconds} s: daemon PSS {pss / 1024:.1f} MB (peak {peak / 1024:.1f} MB)")
        rss = unterminated_osc(latch, tmp, 400)
        print(f"400 MB unterminated OSC: daemon RSS {rss / 1024:.1f} MB")
        for held in (False, True):
            med, worst, n = ping_under_lock(latch, held)
            what = "held by another process" if held else "free"
            print(f"PING with bells, lock {what}: median {med:.2f} ms, max {worst:.2f} ms ({n} pings)")


if __name__ == "__main__":
    main()
