#!/usr/bin/env python3
"""latch side by side with the raw PTY, tmux, GNU screen and dtach.

Run through bench/run.sh, which installs the peers and builds everything first.
Prints one table of absolute figures and ratios from this run, and writes every
sample to $LATCH_BENCH_OUT (default /tmp/latch-bench.json). BENCHMARKS.md says
what each figure means.

Every process started here is recorded and stopped by its pid at the end.
"""

import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATCH = os.environ.get("LATCH_BIN") or os.path.join(REPO, "target", "release", "latch")
TOOLS = os.path.join(REPO, "bench", "tools", "target", "release")
PTYRUN = os.path.join(TOOLS, "ptyrun")
WIRE = os.path.join(TOOLS, "wire")

QUICK = "--quick" in sys.argv
# `--only throughput,echo,...` runs just those sections (the table shows "—" for the rest).
ONLY = None
if "--only" in sys.argv:
    ONLY = set(sys.argv[sys.argv.index("--only") + 1].split(","))


def wanted(section):
    return ONLY is None or section in ONLY

ROUNDS = 1 if QUICK else 3          # throughput rounds (median)
DATA_MB = 20 if QUICK else 100
ECHO_N = 60 if QUICK else 200
PEEK_N = 20 if QUICK else 50
ATTACH_N = 8 if QUICK else 20
CREATE_N = 8 if QUICK else 20
LS_SESSIONS = 100 if QUICK else 1000
SCROLL_MB = 20 if QUICK else 72
END_MARK = b"END-OF-LATCH-BENCH-DATA"

TMP = tempfile.mkdtemp(prefix="latch-bench-")
ROOT = os.path.join(TMP, "root")
SCREENDIR = os.path.join(TMP, "screen")
os.makedirs(SCREENDIR, mode=0o700)
ENV = dict(os.environ)
ENV.update(
    LATCH_ROOT=ROOT,
    SCREENDIR=SCREENDIR,
    TERM="xterm-256color",
    SHELL="/bin/sh",
    HOME=TMP,
)
for k in ("TMUX", "STY", "LATCH_SESSION_ID", "LATCH_INCARNATION"):
    ENV.pop(k, None)
TMUX_CONF = os.path.join(TMP, "tmux.conf")
with open(TMUX_CONF, "w") as f:
    f.write("set -g history-limit 10000\nset -g status off\n")
SCREEN_CONF = os.path.join(TMP, "screenrc")
with open(SCREEN_CONF, "w") as f:
    f.write("defscrollback 10000\nstartup_message off\n")

PEERS = [p for p in ("tmux", "screen", "dtach") if shutil.which(p)]
SKIPPED = {p: "not installed" for p in ("tmux", "screen", "dtach") if p not in PEERS}

# Everything we start, to stop it by pid at the end.
PIDS = set()
RESULTS = {}
T_START = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T_START:6.1f}s] {msg}", file=sys.stderr, flush=True)


def track(pid):
    if pid:
        PIDS.add(int(pid))
    return pid


def run(args, check=True, **kw):
    r = subprocess.run(args, env=ENV, stdin=subprocess.DEVNULL, capture_output=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{args}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r


def popen(args, **kw):
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("stdout", subprocess.DEVNULL)
    kw.setdefault("stderr", subprocess.DEVNULL)
    p = subprocess.Popen(args, env=ENV, **kw)
    track(p.pid)
    return p


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_pid(pid, timeout):
    """Waits for a process that is not our child to exit (pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return True
    try:
        r, _, _ = select.select([fd], [], [], timeout)
        return bool(r)
    finally:
        os.close(fd)


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def pctl(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, round((len(xs) - 1) * p)))
    return xs[i]


def wait_until(cond, timeout, step=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def procs_matching(prefix):
    """Pids whose argv starts with `prefix` (a list of bytes)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[: len(prefix)] == prefix:
            out.append(int(d))
    return out


# ----- data -----

def make_data():
    """~DATA_MB of text lines of varied length (1-120 columns, ~60 on average),
    printable ASCII words, ending with END_MARK."""
    path = os.path.join(TMP, "data.txt")
    import random
    rng = random.Random(7)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(1, 12)))
        for _ in range(2000)
    ]
    lines = []
    size = 0
    while size < 1 << 20:
        target = rng.randint(1, 120)
        line = ""
        while len(line) < target:
            line += rng.choice(words) + " "
        line = line[:target].rstrip() + "\n"
        lines.append(line)
        size += len(line)
    block = "".join(lines).encode()
    with open(path, "wb") as f:
        for _ in range(DATA_MB):
            f.write(block)
        f.write(END_MARK + b"\n")
    return path, os.path.getsize(path)


# ----- latch helpers -----

LATCH_SESSIONS = []  # (daemon pid, child pid)


def latch_new(sid, cmd):
    r = run([LATCH, "new", "-d", "--json", "--id", sid, "--"] + cmd)
    v = json.loads(r.stdout)
    track(v["daemonPid"])
    track(v["childPid"])
    LATCH_SESSIONS.append((v["daemonPid"], v["childPid"]))
    return v


def latch_status(sid):
    r = run([LATCH, "status", sid, "--json"], check=False)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


def latch_readers(sid):
    s = latch_status(sid)
    if not s or not s.get("daemon"):
        return -1
    return s["daemon"]["readers"] + s["daemon"]["writers"]


# ----- throughput -----

def fifo(name):
    path = os.path.join(TMP, name)
    if os.path.exists(path):
        os.unlink(path)
    os.mkfifo(path)
    return path


def gated_cat(data, gate):
    return ["sh", "-c", f"read x < '{gate}'; exec cat '{data}'"]


def open_gate(gate):
    with open(gate, "w") as f:
        f.write("go\n")


def flood_raw(data, size):
    t = time.perf_counter()
    p = popen([PTYRUN, "--", "cat", data])
    p.wait()
    return size / (time.perf_counter() - t) / 1e6


def flood_latch(data, size, nclients, tag):
    gate = fifo(f"gate-{tag}")
    sid = f"fl-{tag}"
    v = latch_new(sid, gated_cat(data, gate))
    clients = [popen([PTYRUN, "--", LATCH, "attach", "--read-only", sid]) for _ in range(nclients)]
    if not wait_until(lambda: latch_readers(sid) == nclients, 10, 0.05):
        raise RuntimeError(f"latch: {nclients} clients did not attach")
    t = time.perf_counter()
    open_gate(gate)
    for c in clients:
        c.wait(timeout=300)
    wait_pid(v["daemonPid"], 300)
    return size / (time.perf_counter() - t) / 1e6


def flood_tmux(data, size, tag):
    gate = fifo(f"gate-{tag}")
    sock = os.path.join(TMP, f"tmux-{tag}.sock")
    cmd = " ".join(gated_cat(data, gate)[:2]) + " " + repr(gated_cat(data, gate)[2])
    run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "fl", "-x", "80", "-y", "24", cmd])
    server = int(run(["tmux", "-S", sock, "display", "-p", "-t", "fl", "#{pid}"]).stdout)
    track(server)
    client = popen([PTYRUN, "--", "tmux", "-S", sock, "attach", "-r", "-t", "fl"])
    if not wait_until(lambda: run(["tmux", "-S", sock, "list-clients"], check=False).stdout.count(b"\n") == 1, 10, 0.05):
        raise RuntimeError("tmux client did not attach")
    t = time.perf_counter()
    open_gate(gate)
    client.wait(timeout=300)
    wait_pid(server, 300)
    return size / (time.perf_counter() - t) / 1e6


def screen_pid(name):
    r = run(["screen", "-ls", name], check=False)
    m = re.search(rb"(\d+)\." + re.escape(name.encode()) + rb"\s", r.stdout)
    return int(m.group(1)) if m else None


def flood_screen(data, size, tag):
    gate = fifo(f"gate-{tag}")
    name = f"fl-{tag}"
    run(["screen", "-c", SCREEN_CONF, "-dmS", name] + gated_cat(data, gate))
    if not wait_until(lambda: screen_pid(name) is not None, 5):
        raise RuntimeError("screen did not start")
    server = track(screen_pid(name))
    client = popen([PTYRUN, "--", "screen", "-c", SCREEN_CONF, "-x", name])
    if not wait_until(lambda: b"ttached" in run(["screen", "-ls", name], check=False).stdout, 10, 0.05):
        raise RuntimeError("screen client did not attach")
    time.sleep(0.3)
    t = time.perf_counter()
    open_gate(gate)
    client.wait(timeout=300)
    wait_pid(server, 300)
    return size / (time.perf_counter() - t) / 1e6


def dtach_master(sock):
    pids = procs_matching([b"dtach", b"-n", sock.encode()])
    return pids[0] if pids else None


def flood_dtach(data, size, tag):
    gate = fifo(f"gate-{tag}")
    sock = os.path.join(TMP, f"dtach-{tag}.sock")
    run(["dtach", "-n", sock] + gated_cat(data, gate))
    master = track(dtach_master(sock))
    client = popen([PTYRUN, "--", "dtach", "-a", sock, "-E", "-r", "none"])
    time.sleep(0.5)  # dtach has no way to ask whether the client is attached
    t = time.perf_counter()
    open_gate(gate)
    client.wait(timeout=300)
    if master:
        wait_pid(master, 300)
    return size / (time.perf_counter() - t) / 1e6


def throughput(data, size):
    cases = [
        ("raw", lambda tag: flood_raw(data, size)),
        ("latch0", lambda tag: flood_latch(data, size, 0, tag)),
        ("latch1", lambda tag: flood_latch(data, size, 1, tag)),
        ("latch2", lambda tag: flood_latch(data, size, 2, tag)),
    ]
    if "tmux" in PEERS:
        cases.append(("tmux1", lambda tag: flood_tmux(data, size, tag)))
    if "screen" in PEERS:
        cases.append(("screen1", lambda tag: flood_screen(data, size, tag)))
    if "dtach" in PEERS:
        cases.append(("dtach1", lambda tag: flood_dtach(data, size, tag)))
    samples = {name: [] for name, _ in cases}
    for r in range(ROUNDS):
        for name, fn in cases:
            try:
                mbps = fn(f"{name}-{r}")
                samples[name].append(mbps)
                log(f"throughput {name} round {r}: {mbps:.1f} MB/s")
            except Exception as e:  # a peer failing is reported, not fatal
                log(f"throughput {name} round {r} failed: {e}")
    RESULTS["throughput_samples"] = samples
    return {k: statistics.median(v) for k, v in samples.items() if v}


# ----- terminals driven through a pty -----

class Pty:
    """A command on a pty we drive (a user's terminal)."""

    def __init__(self, args, rows=24, cols=80):
        import fcntl
        import struct
        import termios
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(
            args, env=ENV, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        track(self.proc.pid)
        os.close(slave)
        self.buf = b""

    def read_until(self, needle, timeout):
        deadline = time.perf_counter() + timeout
        while needle not in self.buf:
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            r, _, _ = select.select([self.master], [], [], left)
            if r:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    return False
                if not chunk:
                    return False
                self.buf += chunk
        return True

    def drain(self, quiet):
        while True:
            r, _, _ = select.select([self.master], [], [], quiet)
            if not r:
                return
            try:
                if not os.read(self.master, 65536):
                    return
            except OSError:
                return

    def close(self, sig=signal.SIGTERM):
        try:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=5)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def echo_latency(args, ready_marker=None):
    """Types one byte at a time into a terminal running (through `args`) a program
    that echoes (cat in cooked mode); times each byte's echo. Erases it after."""
    t = Pty(args)
    try:
        if ready_marker and not t.read_until(ready_marker, 10):
            raise RuntimeError(f"{args[0]}: no first screen")
        t.drain(0.3)
        samples = []
        for i in range(ECHO_N):
            ch = bytes([ord("a") + i % 26])
            t.buf = b""
            t0 = time.perf_counter_ns()
            os.write(t.master, ch)
            if not t.read_until(ch, 5):
                raise RuntimeError(f"{args[0]}: no echo")
            samples.append((time.perf_counter_ns() - t0) / 1e6)
            os.write(t.master, b"\x7f")
            t.drain(0.004)
        return samples
    finally:
        t.close()


def echo_all():
    out = {}
    mark = "ECHO-READY"
    prog = ["sh", "-c", f"echo {mark}; exec cat"]
    out["raw"] = echo_latency(prog, mark.encode())
    latch_new("echo", prog)
    out["latch"] = echo_latency([LATCH, "attach", "echo"], mark.encode())
    if "tmux" in PEERS:
        sock = os.path.join(TMP, "tmux-echo.sock")
        run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "echo", "-x", "80", "-y", "24", f"sh -c 'echo {mark}; exec cat'"])
        track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        out["tmux"] = echo_latency(["tmux", "-S", sock, "attach", "-t", "echo"], mark.encode())
    if "screen" in PEERS:
        run(["screen", "-c", SCREEN_CONF, "-dmS", "echo"] + prog)
        wait_until(lambda: screen_pid("echo") is not None, 5)
        track(screen_pid("echo"))
        out["screen"] = echo_latency(["screen", "-c", SCREEN_CONF, "-x", "echo"], mark.encode())
    if "dtach" in PEERS:
        sock = os.path.join(TMP, "dtach-echo.sock")
        run(["dtach", "-n", sock] + prog)
        track(dtach_master(sock))
        out["dtach"] = echo_latency(["dtach", "-a", sock, "-E", "-r", "none"])
    RESULTS["echo_samples"] = out
    return {k: (pctl(v, 0.5), pctl(v, 0.99)) for k, v in out.items()}


def time_cmd(args, n):
    """Wall time of a command, n runs, ms."""
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        r = subprocess.run(args, env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        xs.append((time.perf_counter() - t) * 1e3)
        if r.returncode != 0:
            raise RuntimeError(f"{args}: exit {r.returncode}")
    return xs


def peek_all():
    out = {"floor": time_cmd(["/bin/true"], PEEK_N)}
    prog = ["sh", "-c", "seq 1 20; exec cat"]
    latch_new("peek", prog)
    run([LATCH, "peek", "peek", "--wait", "20", "--timeout", "10"])  # the output is there
    out["latch"] = time_cmd([LATCH, "peek", "peek"], PEEK_N)
    if "tmux" in PEERS:
        sock = os.path.join(TMP, "tmux-peek.sock")
        run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "peek", "-x", "80", "-y", "24", "sh -c 'seq 1 20; exec cat'"])
        track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        time.sleep(0.3)
        out["tmux"] = time_cmd(["tmux", "-S", sock, "capture-pane", "-p", "-t", "peek"], PEEK_N)
    if "screen" in PEERS:
        run(["screen", "-c", SCREEN_CONF, "-dmS", "peek"] + prog)
        wait_until(lambda: screen_pid("peek") is not None, 5)
        track(screen_pid("peek"))
        time.sleep(0.3)
        hc = os.path.join(TMP, "hardcopy")
        out["screen"] = time_cmd(["screen", "-S", "peek", "-X", "hardcopy", hc], PEEK_N)
    RESULTS["peek_samples"] = out
    return {k: (pctl(v, 0.5), pctl(v, 0.99)) for k, v in out.items()}


def attach_all():
    """Spawn of an attaching client until the session's screen shows on its terminal."""
    mark = "ATTACH-MARK"
    prog = ["sh", "-c", f"echo {mark}; exec cat"]
    targets = {}
    latch_new("att", prog)
    run([LATCH, "peek", "att", "--wait", mark, "--timeout", "10"])
    targets["latch"] = ([LATCH, "attach", "att"], signal.SIGTERM)
    if "tmux" in PEERS:
        sock = os.path.join(TMP, "tmux-att.sock")
        run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "att", "-x", "80", "-y", "24", f"sh -c 'echo {mark}; exec cat'"])
        track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        targets["tmux"] = (["tmux", "-S", sock, "attach", "-t", "att"], signal.SIGTERM)
    if "screen" in PEERS:
        run(["screen", "-c", SCREEN_CONF, "-dmS", "att"] + prog)
        wait_until(lambda: screen_pid("att") is not None, 5)
        track(screen_pid("att"))
        targets["screen"] = (["screen", "-c", SCREEN_CONF, "-x", "att"], signal.SIGHUP)
    # The peers offer no event for "the program has printed": give them a moment.
    time.sleep(0.3)
    out = {}
    for name, (args, sig) in targets.items():
        xs = []
        for _ in range(ATTACH_N):
            t0 = time.perf_counter()
            t = Pty(args)
            ok = t.read_until(mark.encode(), 10)
            xs.append((time.perf_counter() - t0) * 1e3)
            t.close(sig)
            if not ok:
                raise RuntimeError(f"{name}: no first screen")
            time.sleep(0.05)
        out[name] = xs
    RESULTS["attach_samples"] = out
    return {k: (pctl(v, 0.5), pctl(v, 0.99)) for k, v in out.items()}


def create_all():
    """Create detached until it answers."""
    out = {"floor": time_cmd(["/bin/true"], CREATE_N)}
    xs = []
    for i in range(CREATE_N):
        t = time.perf_counter()
        latch_new(f"cr{i}", ["sleep", "100000"])
        xs.append((time.perf_counter() - t) * 1e3)
    out["latch"] = xs
    if "tmux" in PEERS:
        xs = []
        for i in range(CREATE_N):
            sock = os.path.join(TMP, f"tmux-cr{i}.sock")
            t = time.perf_counter()
            run(["tmux", "-S", sock, "-f", "/dev/null", "new-session", "-d", "sleep 100000"])
            xs.append((time.perf_counter() - t) * 1e3)
            track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        out["tmux"] = xs
    if "screen" in PEERS:
        xs = []
        for i in range(CREATE_N):
            name = f"cr{i}"
            t = time.perf_counter()
            run(["screen", "-c", SCREEN_CONF, "-dmS", name, "sleep", "100000"])
            wait_until(lambda: any(e.endswith("." + name) for e in os.listdir(SCREENDIR)), 5, 0.0002)
            xs.append((time.perf_counter() - t) * 1e3)
            track(screen_pid(name))
        out["screen"] = xs
    if "dtach" in PEERS:
        xs = []
        for i in range(CREATE_N):
            sock = os.path.join(TMP, f"dtach-cr{i}.sock")
            t = time.perf_counter()
            run(["dtach", "-n", sock, "sleep", "100000"])
            wait_until(lambda: os.path.exists(sock), 5, 0.0002)
            xs.append((time.perf_counter() - t) * 1e3)
            track(dtach_master(sock))
        out["dtach"] = xs
    RESULTS["create_samples"] = out
    return {k: (pctl(v, 0.5), pctl(v, 0.99)) for k, v in out.items()}


# ----- memory -----

def idle_memory():
    """PSS per idle session: latch daemons, tmux's one server (divided by the number
    of sessions), SCREEN processes, dtach masters. Programs (sleep) excluded."""
    out = {}
    for count in (10, 50):
        daemons = []
        for i in range(count):
            v = latch_new(f"idle{count}-{i}", ["sleep", "100000"])
            daemons.append(v["daemonPid"])
        time.sleep(0.5)  # measure at rest: let start-up allocations settle
        out[f"latch{count}"] = sum(pss_kb(p) or 0 for p in daemons) / count / 1024
        if "tmux" in PEERS:
            sock = os.path.join(TMP, f"tmux-idle{count}.sock")
            for i in range(count):
                run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", f"i{i}", "sleep 100000"])
            server = track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
            time.sleep(0.5)
            out[f"tmux{count}"] = (pss_kb(server) or 0) / count / 1024
        if "screen" in PEERS:
            pids = []
            for i in range(count):
                name = f"idle{count}-{i}"
                run(["screen", "-c", SCREEN_CONF, "-dmS", name, "sleep", "100000"])
                wait_until(lambda: screen_pid(name) is not None, 5)
                pids.append(track(screen_pid(name)))
            time.sleep(0.5)
            out[f"screen{count}"] = sum(pss_kb(p) or 0 for p in pids) / count / 1024
        if "dtach" in PEERS:
            pids = []
            for i in range(count):
                sock = os.path.join(TMP, f"dtach-idle{count}-{i}.sock")
                run(["dtach", "-n", sock, "sleep", "100000"])
                pids.append(track(dtach_master(sock)))
            time.sleep(0.5)
            out[f"dtach{count}"] = sum(pss_kb(p) or 0 for p in pids if p) / count / 1024
        del start
    return out


def flood_memory(data, size):
    """PSS after a flood (no client), and during a flood with one stalled client."""
    out = {}
    done = os.path.join(TMP, "flood-done")
    v = latch_new("mem", ["sh", "-c", f"cat '{data}'; : > '{done}'; exec sleep 100000"])
    if not wait_until(lambda: os.path.exists(done), 300, 0.02):
        raise RuntimeError("latch flood did not finish")
    time.sleep(0.2)
    out["latch_after_flood"] = (pss_kb(v["daemonPid"]) or 0) / 1024
    # The scrollback really holds the flood's last lines.
    full = run([LATCH, "peek", "mem", "--full"]).stdout
    out["latch_scrollback_lines"] = full.count(b"\n") + 1
    out["latch_scrollback_has_end"] = END_MARK in full
    if "tmux" in PEERS:
        sock = os.path.join(TMP, "tmux-mem.sock")
        done2 = done + "-tmux"
        run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "mem", "-x", "80", "-y", "24",
             f"sh -c \"cat '{data}'; : > '{done2}'; exec sleep 100000\""])
        server = track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        wait_until(lambda: os.path.exists(done2), 300, 0.02)
        time.sleep(0.2)
        out["tmux_after_flood"] = (pss_kb(server) or 0) / 1024

    # One client stalled (SIGSTOP) during a flood.
    gate = fifo("gate-stall")
    done3 = done + "-stall"
    v = latch_new("stall", ["sh", "-c", f"read x < '{gate}'; cat '{data}'; : > '{done3}'; exec sleep 100000"])
    client = popen([PTYRUN, "--", LATCH, "attach", "--read-only", "stall"])
    if not wait_until(lambda: latch_readers("stall") == 1, 10, 0.05):
        raise RuntimeError("stall client did not attach")
    before = (pss_kb(v["daemonPid"]) or 0) / 1024
    attach_pids = [p for p in children(client.pid)]
    for p in attach_pids:
        os.kill(p, signal.SIGSTOP)
    peak = 0
    t = time.perf_counter()
    open_gate(gate)
    while not os.path.exists(done3) and time.perf_counter() - t < 300:
        peak = max(peak, pss_kb(v["daemonPid"]) or 0)
        time.sleep(0.05)
    elapsed = time.perf_counter() - t
    time.sleep(0.2)
    out["stall_before"] = before
    out["stall_peak"] = peak / 1024
    out["stall_after"] = (pss_kb(v["daemonPid"]) or 0) / 1024
    out["stall_mbps"] = size / elapsed / 1e6
    out["stall_readers_after"] = latch_readers("stall")
    for p in attach_pids:
        os.kill(p, signal.SIGCONT)
    try:
        client.wait(timeout=10)
    except subprocess.TimeoutExpired:
        client.kill()
    out["stall_client_exit"] = client.returncode
    return out


def scrollback_memory():
    """PSS after a flood of 70-column lines (SCROLL_MB, so the 10,000-line scrollback
    is full): each latch build's daemon (LATCH_BIN, and LATCH_BIN_BEFORE when set, in
    the same run) and tmux's server (history-limit 10000), no client attached."""
    path = os.path.join(TMP, "lines70.txt")
    line = 0
    with open(path, "wb") as f:
        block = []
        size = 0
        while size < SCROLL_MB * 1000 * 1000:
            text = f"{line:09d} " + "".join(chr(97 + (line * 7 + i) % 26) for i in range(60))
            text = (text + " " * 70)[:70] + "\n"
            block.append(text)
            size += len(text)
            line += 1
            if len(block) == 4096:
                f.write("".join(block).encode())
                block = []
        f.write("".join(block).encode())
    size = os.path.getsize(path)
    out = {"mb": size / 1e6}
    builds = [("latch", LATCH)]
    if os.environ.get("LATCH_BIN_BEFORE"):
        builds.insert(0, ("latch_before", os.environ["LATCH_BIN_BEFORE"]))
    for tag, binary in builds:
        done = os.path.join(TMP, f"sb-done-{tag}")
        r = run([binary, "new", "-d", "--json", "--id", f"sb-{tag}", "--", "sh", "-c",
                 f"cat '{path}'; : > '{done}'; exec sleep 100000"])
        v = json.loads(r.stdout)
        track(v["daemonPid"])
        track(v["childPid"])
        LATCH_SESSIONS.append((v["daemonPid"], v["childPid"]))
        if not wait_until(lambda: os.path.exists(done), 300, 0.02):
            raise RuntimeError(f"{tag}: flood did not finish")
        # The daemon applies its queue once the program has been quiet for 5 ms.
        time.sleep(0.3)
        out[tag] = (pss_kb(v["daemonPid"]) or 0) / 1024
        # Then after a full capture (its buffers come and go).
        full = run([binary, "peek", f"sb-{tag}", "--full", "--plain"]).stdout
        time.sleep(0.2)
        out[f"{tag}_after_peek"] = (pss_kb(v["daemonPid"]) or 0) / 1024
        out[f"{tag}_lines"] = full.count(b"\n") + 1
    if "tmux" in PEERS:
        sock = os.path.join(TMP, "tmux-sb.sock")
        done = os.path.join(TMP, "sb-done-tmux")
        run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "sb", "-x", "80", "-y", "24",
             f"sh -c \"cat '{path}'; : > '{done}'; exec sleep 100000\""])
        server = track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        wait_until(lambda: os.path.exists(done), 300, 0.02)
        time.sleep(0.3)
        out["tmux"] = (pss_kb(server) or 0) / 1024
        hist = run(["tmux", "-S", sock, "display", "-p", "-t", "sb", "#{history_size}"]).stdout
        run(["tmux", "-S", sock, "capture-pane", "-p", "-S", "-", "-t", "sb"])
        time.sleep(0.2)
        out["tmux_after_peek"] = (pss_kb(server) or 0) / 1024
        out["tmux_history"] = int(hist or 0)
    return out


def ls_many():
    """`latch ls --json` over LS_SESSIONS real sessions (daemon + sleep each)."""
    out = {}
    base = len(os.listdir(ROOT)) if os.path.isdir(ROOT) else 0
    # Two creators at a time (2 cores).
    procs = []
    made = 0
    pending = []
    for i in range(LS_SESSIONS):
        pending.append(i)
    while pending or procs:
        while pending and len(procs) < 2:
            i = pending.pop()
            p = subprocess.Popen([LATCH, "new", "-d", "--json", "--id", f"ls{i}", "--", "sleep", "100000"],
                                 env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            procs.append(p)
        p = procs.pop(0)
        stdout, _ = p.communicate()
        if p.returncode == 0:
            v = json.loads(stdout)
            track(v["daemonPid"])
            track(v["childPid"])
            LATCH_SESSIONS.append((v["daemonPid"], v["childPid"]))
            made += 1
    out["sessions"] = made
    xs = time_cmd([LATCH, "ls", "--json"], 5)
    out["ls_ms"] = statistics.median(xs)
    r = run([LATCH, "ls", "--json"])
    out["ls_rows"] = len(json.loads(r.stdout))
    out["ls_bytes"] = len(r.stdout)
    del base
    return out


def wire_bench():
    if not os.path.exists(WIRE):
        return {}
    v = latch_new("wire", ["cat"])
    sock = os.path.join(ROOT, "wire.sock")
    r = run([WIRE, sock, "wire", v["incarnation"]])
    out = {}
    for line in r.stdout.decode().splitlines():
        k, val = line.split()
        out[k] = float(val)
    return out


# ----- cleanup -----

def cleanup():
    for sock in os.listdir(TMP):
        if sock.startswith("tmux-") and sock.endswith(".sock"):
            subprocess.run(["tmux", "-S", os.path.join(TMP, sock), "kill-server"], env=ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Stop everything we recorded, by pid, and their direct children (the programs).
    for pid in list(PIDS):
        for c in children(pid):
            PIDS.add(c)
    for pid in PIDS:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in PIDS:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    shutil.rmtree(TMP, ignore_errors=True)


# ----- report -----

def fmt(x, unit="", nd=1):
    if x is None or (isinstance(x, float) and x != x):
        return "—"
    return f"{x:.{nd}f}{unit}"


def ratio(a, b):
    if not a or not b:
        return "—"
    return f"{a / b:.2f}x"


def main():
    log(f"peers: {', '.join(PEERS) or 'none'}; skipped: {SKIPPED or 'none'}; scratch {TMP}")
    data, size = make_data()
    log(f"data: {size / 1e6:.0f} MB of text lines")
    tp, echo, peek, att, cr, mem, fm, wire, ls, sb = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
    try:
        if wanted("throughput"):
            tp = throughput(data, size)
            RESULTS["throughput"] = tp
        if wanted("echo"):
            echo = echo_all()
            RESULTS["echo"] = echo
            log("echo done")
        if wanted("peek"):
            peek = peek_all()
            RESULTS["peek"] = peek
            log("peek done")
        if wanted("attach"):
            att = attach_all()
            RESULTS["attach"] = att
            log("attach done")
        if wanted("create"):
            cr = create_all()
            RESULTS["create"] = cr
            log("create done")
        if wanted("memory"):
            mem = idle_memory()
            RESULTS["idle_memory"] = mem
            log("idle memory done")
            fm = flood_memory(data, size)
            RESULTS["flood_memory"] = fm
            log("flood memory done")
        if wanted("scrollback"):
            sb = scrollback_memory()
            RESULTS["scrollback_memory"] = sb
            log("scrollback memory done")
        if wanted("wire"):
            wire = wire_bench()
            RESULTS["wire"] = wire
            log("wire done")
        if wanted("ls"):
            ls = ls_many()
            RESULTS["ls"] = ls
            log("ls done")
    finally:
        cleanup()
    out_path = os.environ.get("LATCH_BENCH_OUT", "/tmp/latch-bench.json")
    with open(out_path, "w") as f:
        json.dump(RESULTS, f, indent=1)

    g = lambda d, k, i=0: d.get(k, (None, None))[i] if isinstance(d.get(k), tuple) else d.get(k)
    rows = []
    rows.append(("output throughput, 1 client (MB/s, median of %d)" % ROUNDS,
                 fmt(tp.get("raw")), fmt(tp.get("latch1")), fmt(tp.get("tmux1")), fmt(tp.get("screen1")), fmt(tp.get("dtach1")),
                 ratio(tp.get("latch1"), tp.get("raw")), ratio(tp.get("latch1"), tp.get("tmux1")),
                 ">= 0.85x raw, >= dtach"))
    rows.append(("output throughput, 0 / 2 clients (MB/s)", "", f"{fmt(tp.get('latch0'))} / {fmt(tp.get('latch2'))}",
                 "", "", "", f"{ratio(tp.get('latch0'), tp.get('raw'))} / {ratio(tp.get('latch2'), tp.get('raw'))}", "", "no multiplying"))
    e = lambda k: f"{fmt(g(echo, k, 0), '', 2)} / {fmt(g(echo, k, 1), '', 2)}" if k in echo else "—"
    rows.append(("keystroke echo, attached (ms p50 / p99)", e("raw"), e("latch"), e("tmux"), e("screen"), e("dtach"),
                 ratio(g(echo, "latch"), g(echo, "raw")), ratio(g(echo, "latch"), g(echo, "tmux")), "<= tmux"))
    p = lambda k: f"{fmt(g(peek, k, 0), '', 2)} / {fmt(g(peek, k, 1), '', 2)}" if k in peek else "—"
    rows.append(("snapshot as one CLI process (ms p50 / p99)", p("floor") + " (spawn)", p("latch"), p("tmux"), p("screen"), "n/a",
                 ratio(g(peek, "latch"), g(peek, "floor")), ratio(g(peek, "latch"), g(peek, "tmux")), "<= 0.7x tmux"))
    a = lambda k: f"{fmt(g(att, k, 0), '', 1)} / {fmt(g(att, k, 1), '', 1)}" if k in att else "—"
    rows.append(("attach to first screen (ms p50 / p99)", "", a("latch"), a("tmux"), a("screen"), "n/a",
                 "", ratio(g(att, "latch"), g(att, "tmux")), "—"))
    c = lambda k: f"{fmt(g(cr, k, 0), '', 1)} / {fmt(g(cr, k, 1), '', 1)}" if k in cr else "—"
    rows.append(("create detached until it answers (ms p50 / p99)", c("floor") + " (spawn)", c("latch"), c("tmux"), c("screen"), c("dtach"),
                 ratio(g(cr, "latch"), g(cr, "floor")), ratio(g(cr, "latch"), g(cr, "tmux")), "<= screen"))
    for n in (10, 50):
        rows.append((f"idle memory per session, PSS MB ({n} sessions)", "—", fmt(mem.get(f"latch{n}"), "", 2),
                     fmt(mem.get(f"tmux{n}"), "", 2), fmt(mem.get(f"screen{n}"), "", 2), fmt(mem.get(f"dtach{n}"), "", 2),
                     "", ratio(mem.get(f"latch{n}"), mem.get(f"tmux{n}")), "<= 0.6 MB"))
    rows.append(("PSS after a %d MB flood, no client (MB)" % round(size / 1e6), "", fmt(fm.get("latch_after_flood")),
                 fmt(fm.get("tmux_after_flood")), "", "", "", ratio(fm.get("latch_after_flood"), fm.get("tmux_after_flood")),
                 "bounded (scrollback 10,000)"))
    if sb:
        for suffix, what in (("", "quiet"), ("_after_peek", "after one full capture")):
            before = f" (before: {fmt(sb.get('latch_before' + suffix))})" if "latch_before" in sb else ""
            rows.append(("PSS after a %d MB flood of 70-column lines, history full, %s (MB)" % (round(sb.get("mb", 0)), what), "",
                         fmt(sb.get("latch" + suffix)) + before, fmt(sb.get("tmux" + suffix)), "", "", "",
                         ratio(sb.get("latch" + suffix), sb.get("tmux" + suffix)), "<= tmux"))
    rows.append(("PSS during a flood, 1 client SIGSTOPped: before / peak / after (MB)", "",
                 f"{fmt(fm.get('stall_before'))} / {fmt(fm.get('stall_peak'))} / {fmt(fm.get('stall_after'))}",
                 "", "", "", "", "", "bounded"))
    rows.append(("flood throughput with that stalled client (MB/s)", "", fmt(fm.get("stall_mbps")), "", "", "",
                 ratio(fm.get("stall_mbps"), tp.get("raw")), "", "PTY never stalls"))
    rows.append((f"`latch ls --json`, {ls.get('sessions')} sessions (ms, median of 5)", "", fmt(ls.get("ls_ms")),
                 "", "", "", "", "", "< 100 ms"))
    if wire:
        rows.append(("wire: OUTPUT 32 KiB encode+decode (frames/s; MB/s)", "",
                     f"{wire.get('codec_output32k_frames_per_s', 0):.0f}; {wire.get('codec_output32k_mb_per_s', 0):.0f}",
                     "", "", "", "", "", "—"))
        rows.append(("wire: 1-byte OUTPUT / INPUT encode+decode (frames/s)", "",
                     f"{wire.get('codec_output1_frames_per_s', 0) / 1e6:.2f}M / {wire.get('codec_input1_frames_per_s', 0) / 1e6:.2f}M",
                     "", "", "", "", "", "—"))
        rows.append(("keystroke echo through the daemon alone, no CLI client (µs p50 / p99)", "",
                     f"{wire.get('daemon_echo_p50_us', 0):.0f} / {wire.get('daemon_echo_p99_us', 0):.0f}",
                     "", "", "", "", "", "—"))
        rows.append(("wire: connect vs connect+HELLO+BIND (µs p50)", "",
                     f"{wire.get('connect_p50_us', 0):.0f} vs {wire.get('hello_bind_p50_us', 0):.0f}",
                     "", "", "", "", "", "—"))

    print()
    print(f"latch benchmarks — {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
          f"{size / 1e6:.0f} MB of text, loadavg before/after {RESULTS.get('load0', '')}{os.getloadavg()[0]:.2f}")
    if SKIPPED:
        print(f"skipped peers: {SKIPPED}")
    print()
    print("| figure | raw PTY | latch | tmux | screen | dtach | latch/raw | latch/tmux | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    print(f"scrollback after the flood: {fm.get('latch_scrollback_lines')} lines, ends with the data's last line: {fm.get('latch_scrollback_has_end')}; "
          f"stalled client: readers after = {fm.get('stall_readers_after')}, its exit code {fm.get('stall_client_exit')}")
    if sb:
        print(f"scrollback memory: latch kept {sb.get('latch_lines')} lines"
              + (f" (before: {sb.get('latch_before_lines')})" if "latch_before" in sb else "")
              + f", tmux history_size {sb.get('tmux_history')}")
    print(f"all samples: {out_path}; total {time.monotonic() - T_START:.0f} s")


if __name__ == "__main__":
    RESULTS["load0"] = f"{os.getloadavg()[0]:.2f} / "
    main()
