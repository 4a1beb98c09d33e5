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
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where bench/run.sh built them: $CARGO_TARGET_DIR when set, else each workspace's
# target/; under the build target's directory (.cargo/config.toml names one), else
# directly under it (a build with another CARGO_BUILD_TARGET or none).
_TARGET = os.environ.get("CARGO_TARGET_DIR")


def _release_dir(target):
    named = os.path.join(target, "x86_64-unknown-linux-gnu", "release")
    return named if os.path.isdir(named) else os.path.join(target, "release")


LATCH = os.environ.get("LATCH_BIN") or os.path.join(_release_dir(_TARGET or os.path.join(REPO, "target")), "latch")
TOOLS = _release_dir(_TARGET or os.path.join(REPO, "bench", "tools", "target"))
PTYRUN = os.path.join(TOOLS, "ptyrun")
WIRE = os.path.join(TOOLS, "wire")

QUICK = "--quick" in sys.argv
# `--only throughput,echo,...` runs just those sections (the table shows "—" for the rest).
ONLY = None
if "--only" in sys.argv:
    ONLY = set(sys.argv[sys.argv.index("--only") + 1].split(","))


def wanted(section):
    return ONLY is None or section in ONLY

# Every figure of the issue is taken in ROUNDS rounds, each round taking every peer in
# turn (so a ratio's two sides come from the same minute); the table gives the median
# of the per-round figures and their spread (min-max).
ROUNDS = 5
DATA_MB = 8 if QUICK else 64
ECHO_N = 20 if QUICK else 40        # keystrokes per peer per round
PEEK_N = 5 if QUICK else 10         # peeks per peer per round
ATTACH_N = 8 if QUICK else 20
CREATE_N = 2 if QUICK else 4        # creations per peer per round
IDLE_N = 10                         # sessions per peer for idle PSS, each round afresh
IDLE_SETTLE_S = 3.0                 # at rest: past the daemon's hibernation delay (SPEC §8)
LS_SESSIONS = 100 if QUICK else 1000
LS_WORKERS = 4                      # parallel `latch new -d` while filling for ls
SCROLL_MB = 8 if QUICK else 72
SCROLL_ROUNDS = 2 if QUICK else ROUNDS
TERM_CHUNK = 4096                   # bytes per read of the terminal reader (script's stdout)
# Optional: cap the terminal reader at this many MB/s (a slow terminal's drawing rate).
TERM_MBPS = float(os.environ.get("LATCH_BENCH_TERM_MBPS") or 0)
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

LATCH_SESSIONS = []  # (daemon pid, child pid, id)


def latch_new(sid, cmd):
    r = run([LATCH, "new", "-d", "--json", "--id", sid, "--"] + cmd)
    v = json.loads(r.stdout)
    track(v["daemonPid"])
    track(v["childPid"])
    LATCH_SESSIONS.append((v["daemonPid"], v["childPid"], sid))
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


class Terminals:
    """The terminals of a throughput case's clients. `ptyrun`: each client on a PTY
    read as fast as ptyrun can (64 KiB reads, nothing drawn). `script`: each client
    under `script -qfec CMD /dev/null` (its own PTY, 24x80), script's stdout a pipe
    this process reads TERM_CHUNK bytes at a time, as a terminal emulator reads its
    PTY: script blocks when we have not read, so the client blocks writing its
    terminal, as under a real terminal that is busy drawing."""

    def __init__(self, kind, argss):
        self.kind = kind
        self.procs = []
        for args in argss:
            if kind == "ptyrun":
                self.procs.append(popen([PTYRUN, "--"] + args))
            else:
                inner = "stty rows 24 cols 80 2>/dev/null; exec " + shlex.join(args)
                # stdin: a pipe never written nor closed (a terminal nobody types on).
                self.procs.append(popen(["script", "-qfec", inner, "/dev/null"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        self.stats = []

    def finish(self, timeout=300):
        """Waits for every client to exit, reading its terminal to the end. Records
        per client: bytes read, exit code, whether latch's "cut off" line or the
        data's END_MARK reached the terminal."""
        if self.kind == "ptyrun":
            for p in self.procs:
                p.wait(timeout=timeout)
            return
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        total = 0
        st = [{"bytes": 0, "cut_off": False, "end_seen": False, "tail": b""} for _ in self.procs]
        fds = {p.stdout.fileno(): i for i, p in enumerate(self.procs)}
        while fds:
            r, _, _ = select.select(list(fds), [], [], max(0, deadline - time.monotonic()))
            if not r:
                raise RuntimeError("terminal reader: timed out")
            for fd in r:
                chunk = os.read(fd, TERM_CHUNK)
                i = fds[fd]
                if not chunk:
                    del fds[fd]
                    continue
                s = st[i]
                s["bytes"] += len(chunk)
                total += len(chunk)
                if TERM_MBPS:
                    ahead = total / (TERM_MBPS * 1e6) - (time.monotonic() - t0)
                    if ahead > 0.001:
                        time.sleep(ahead)
                seen = s["tail"] + chunk
                s["cut_off"] |= b"cut off" in seen
                s["end_seen"] |= END_MARK in seen
                s["tail"] = seen[-64:]
        for p, s in zip(self.procs, st):
            p.wait(timeout=max(1, deadline - time.monotonic()))
            p.stdout.close()
            p.stdin.close()
            s["exit"] = p.returncode
            del s["tail"]
        self.stats = st


TERM_STATS = {}  # case -> per round, per client: Terminals.stats


def reader_ceiling(data, size):
    """The terminal reader's own ceiling: `cat FILE` into the same pipe reader, no PTY."""
    t = time.perf_counter()
    p = popen(["cat", data], stdout=subprocess.PIPE)
    fd = p.stdout.fileno()
    while os.read(fd, TERM_CHUNK):
        pass
    p.wait()
    p.stdout.close()
    return size / (time.perf_counter() - t) / 1e6


def flood_raw(data, size, term="ptyrun", tag=""):
    t = time.perf_counter()
    if term == "ptyrun":
        p = popen([PTYRUN, "--", "cat", data])
        p.wait()
    else:
        c = Terminals(term, [["cat", data]])
        c.finish()
        TERM_STATS.setdefault("raw", []).append(c.stats)
    return size / (time.perf_counter() - t) / 1e6


def flood_latch(data, size, nclients, tag, term="ptyrun"):
    gate = fifo(f"gate-{tag}")
    sid = f"fl-{tag}"
    v = latch_new(sid, gated_cat(data, gate))
    clients = Terminals(term, [[LATCH, "attach", "--read-only", sid]] * nclients)
    if not wait_until(lambda: latch_readers(sid) == nclients, 10, 0.05):
        raise RuntimeError(f"latch: {nclients} clients did not attach")
    t = time.perf_counter()
    open_gate(gate)
    clients.finish()
    if term != "ptyrun":
        TERM_STATS.setdefault(f"latch{nclients}", []).append(clients.stats)
    wait_pid(v["daemonPid"], 300)
    return size / (time.perf_counter() - t) / 1e6


def flood_tmux(data, size, tag, term="ptyrun"):
    gate = fifo(f"gate-{tag}")
    sock = os.path.join(TMP, f"tmux-{tag}.sock")
    cmd = " ".join(gated_cat(data, gate)[:2]) + " " + repr(gated_cat(data, gate)[2])
    run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "fl", "-x", "80", "-y", "24", cmd])
    server = int(run(["tmux", "-S", sock, "display", "-p", "-t", "fl", "#{pid}"]).stdout)
    track(server)
    client = Terminals(term, [["tmux", "-S", sock, "attach", "-r", "-t", "fl"]])
    if not wait_until(lambda: run(["tmux", "-S", sock, "list-clients"], check=False).stdout.count(b"\n") == 1, 10, 0.05):
        raise RuntimeError("tmux client did not attach")
    t = time.perf_counter()
    open_gate(gate)
    client.finish()
    if term != "ptyrun":
        TERM_STATS.setdefault("tmux1", []).append(client.stats)
    wait_pid(server, 300)
    return size / (time.perf_counter() - t) / 1e6


def screen_pid(name):
    r = run(["screen", "-ls", name], check=False)
    m = re.search(rb"(\d+)\." + re.escape(name.encode()) + rb"\s", r.stdout)
    return int(m.group(1)) if m else None


def flood_screen(data, size, tag, term="ptyrun"):
    gate = fifo(f"gate-{tag}")
    name = f"fl-{tag}"
    run(["screen", "-c", SCREEN_CONF, "-dmS", name] + gated_cat(data, gate))
    if not wait_until(lambda: screen_pid(name) is not None, 5):
        raise RuntimeError("screen did not start")
    server = track(screen_pid(name))
    client = Terminals(term, [["screen", "-c", SCREEN_CONF, "-x", name]])
    if not wait_until(lambda: b"ttached" in run(["screen", "-ls", name], check=False).stdout, 10, 0.05):
        raise RuntimeError("screen client did not attach")
    time.sleep(0.3)
    t = time.perf_counter()
    open_gate(gate)
    client.finish()
    if term != "ptyrun":
        TERM_STATS.setdefault("screen1", []).append(client.stats)
    wait_pid(server, 300)
    return size / (time.perf_counter() - t) / 1e6


def dtach_master(sock):
    pids = procs_matching([b"dtach", b"-n", sock.encode()])
    return pids[0] if pids else None


def flood_dtach(data, size, tag, term="ptyrun"):
    gate = fifo(f"gate-{tag}")
    sock = os.path.join(TMP, f"dtach-{tag}.sock")
    run(["dtach", "-n", sock] + gated_cat(data, gate))
    master = track(dtach_master(sock))
    client = Terminals(term, [["dtach", "-a", sock, "-E", "-r", "none"]])
    time.sleep(0.5)  # dtach has no way to ask whether the client is attached
    t = time.perf_counter()
    open_gate(gate)
    client.finish()
    if term != "ptyrun":
        TERM_STATS.setdefault("dtach1", []).append(client.stats)
    if master:
        wait_pid(master, 300)
    return size / (time.perf_counter() - t) / 1e6


def throughput(data, size, term="ptyrun"):
    """Per round, every case in turn: MB/s per case per round (None: it failed)."""
    cases = [
        ("raw", lambda tag: flood_raw(data, size, term)),
        ("latch1", lambda tag: flood_latch(data, size, 1, tag, term)),
        ("latch2", lambda tag: flood_latch(data, size, 2, tag, term)),
    ]
    if term == "ptyrun":
        cases.insert(1, ("latch0", lambda tag: flood_latch(data, size, 0, tag)))
    else:
        cases.insert(0, ("reader", lambda tag: reader_ceiling(data, size)))
    if "tmux" in PEERS:
        cases.append(("tmux1", lambda tag: flood_tmux(data, size, tag, term)))
    if "screen" in PEERS:
        cases.append(("screen1", lambda tag: flood_screen(data, size, tag, term)))
    if "dtach" in PEERS:
        cases.append(("dtach1", lambda tag: flood_dtach(data, size, tag, term)))
    samples = {name: [] for name, _ in cases}
    for r in range(ROUNDS):
        for name, fn in cases:
            try:
                mbps = fn(f"{term}-{name}-{r}")
                log(f"throughput ({term}) {name} round {r}: {mbps:.1f} MB/s")
            except Exception as e:  # a peer failing is reported, not fatal
                mbps = None
                log(f"throughput ({term}) {name} round {r} failed: {e}")
            samples[name].append(mbps)
    return samples


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


def echo_all(r=0):
    out = {}
    mark = "ECHO-READY"
    prog = ["sh", "-c", f"echo {mark}; exec cat"]
    out["raw"] = echo_latency(prog, mark.encode())
    latch_new(f"echo{r}", prog)
    out["latch"] = echo_latency([LATCH, "attach", f"echo{r}"], mark.encode())
    if "tmux" in PEERS:
        sock = os.path.join(TMP, f"tmux-echo{r}.sock")
        run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "echo", "-x", "80", "-y", "24", f"sh -c 'echo {mark}; exec cat'"])
        track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        out["tmux"] = echo_latency(["tmux", "-S", sock, "attach", "-t", "echo"], mark.encode())
    if "screen" in PEERS:
        run(["screen", "-c", SCREEN_CONF, "-dmS", f"echo{r}"] + prog)
        wait_until(lambda: screen_pid(f"echo{r}") is not None, 5)
        track(screen_pid(f"echo{r}"))
        out["screen"] = echo_latency(["screen", "-c", SCREEN_CONF, "-x", f"echo{r}"], mark.encode())
    if "dtach" in PEERS:
        sock = os.path.join(TMP, f"dtach-echo{r}.sock")
        run(["dtach", "-n", sock] + prog)
        track(dtach_master(sock))
        out["dtach"] = echo_latency(["dtach", "-a", sock, "-E", "-r", "none"])
    return out


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


def in_rounds(name, fn):
    """fn(r) -> {peer: [samples]} for round r, ROUNDS rounds. Returns {peer: [the
    round's median, per round]} (None where a round failed); every sample is kept in
    RESULTS[name + "_samples"]."""
    per = []
    for r in range(ROUNDS):
        try:
            per.append(fn(r))
        except Exception as e:  # a peer failing is reported, not fatal
            log(f"{name} round {r} failed: {e}")
            per.append({})
        log(f"{name} round {r}: " + ", ".join(f"{k} {pctl(v, 0.5):.2f}" for k, v in per[-1].items()))
    RESULTS[name + "_samples"] = per
    peers = sorted({k for d in per for k in d})
    return {k: [pctl(d[k], 0.5) if k in d else None for d in per] for k in peers}


def quiesce():
    """Ends everything started so far (latch sessions through `latch rm --force`, tmux
    servers, screen and dtach masters, by pid), so that a memory figure is not shared
    with earlier sections' processes (PSS divides shared pages among them)."""
    for daemon, child, sid in LATCH_SESSIONS:
        # Exited ones too: their records would be listed by `ls`.
        run([LATCH, "rm", "--force", sid], check=False)
    LATCH_SESSIONS.clear()
    for sock in os.listdir(TMP):
        if sock.startswith("tmux-") and sock.endswith(".sock"):
            run(["tmux", "-S", os.path.join(TMP, sock), "kill-server"], check=False)
            os.unlink(os.path.join(TMP, sock))
    for pid in list(PIDS):
        if alive(pid):
            for c in children(pid):
                try:
                    os.kill(c, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            wait_pid(pid, 5)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        PIDS.discard(pid)
    run(["screen", "-wipe"], check=False)


def peek_all(r=0):
    out = {"floor": time_cmd(["/bin/true"], PEEK_N)}
    prog = ["sh", "-c", "seq 1 20; exec cat"]
    latch_new(f"peek{r}", prog)
    run([LATCH, "peek", f"peek{r}", "--wait", "20", "--timeout", "10"])  # the output is there
    out["latch"] = time_cmd([LATCH, "peek", f"peek{r}"], PEEK_N)
    if "tmux" in PEERS:
        sock = os.path.join(TMP, f"tmux-peek{r}.sock")
        run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", "peek", "-x", "80", "-y", "24", "sh -c 'seq 1 20; exec cat'"])
        track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        time.sleep(0.3)
        out["tmux"] = time_cmd(["tmux", "-S", sock, "capture-pane", "-p", "-t", "peek"], PEEK_N)
    if "screen" in PEERS:
        run(["screen", "-c", SCREEN_CONF, "-dmS", f"peek{r}"] + prog)
        wait_until(lambda: screen_pid(f"peek{r}") is not None, 5)
        track(screen_pid(f"peek{r}"))
        time.sleep(0.3)
        hc = os.path.join(TMP, "hardcopy")
        out["screen"] = time_cmd(["screen", "-S", f"peek{r}", "-X", "hardcopy", hc], PEEK_N)
    return out


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


def create_all(r=0):
    """Create detached until it answers."""
    out = {"floor": time_cmd(["/bin/true"], CREATE_N)}
    xs = []
    for i in range(CREATE_N):
        t = time.perf_counter()
        latch_new(f"cr{r}-{i}", ["sleep", "100000"])
        xs.append((time.perf_counter() - t) * 1e3)
    out["latch"] = xs
    if "tmux" in PEERS:
        xs = []
        for i in range(CREATE_N):
            sock = os.path.join(TMP, f"tmux-cr{r}-{i}.sock")
            t = time.perf_counter()
            run(["tmux", "-S", sock, "-f", "/dev/null", "new-session", "-d", "sleep 100000"])
            xs.append((time.perf_counter() - t) * 1e3)
            track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        out["tmux"] = xs
    if "screen" in PEERS:
        xs = []
        for i in range(CREATE_N):
            name = f"cr{r}-{i}"
            t = time.perf_counter()
            run(["screen", "-c", SCREEN_CONF, "-dmS", name, "sleep", "100000"])
            wait_until(lambda: any(e.endswith("." + name) for e in os.listdir(SCREENDIR)), 5, 0.0002)
            xs.append((time.perf_counter() - t) * 1e3)
            track(screen_pid(name))
        out["screen"] = xs
    if "dtach" in PEERS:
        xs = []
        for i in range(CREATE_N):
            sock = os.path.join(TMP, f"dtach-cr{r}-{i}.sock")
            t = time.perf_counter()
            run(["dtach", "-n", sock, "sleep", "100000"])
            wait_until(lambda: os.path.exists(sock), 5, 0.0002)
            xs.append((time.perf_counter() - t) * 1e3)
            track(dtach_master(sock))
        out["dtach"] = xs
    return out


# ----- memory -----

def idle_memory(count, r=0):
    """PSS per idle session: latch daemons, tmux's one server (divided by the number
    of sessions), SCREEN processes, dtach masters. Programs (sleep) excluded. Run
    after quiesce(): nothing else of ours shares their pages. {peer: [KB]}"""
    out = {}
    if True:
        daemons = []
        for i in range(count):
            v = latch_new(f"idle{count}-{r}-{i}", ["sleep", "100000"])
            daemons.append(v["daemonPid"])
        settle_idle()
        out["latch"] = [sum(pss_kb(p) or 0 for p in daemons) / count]
        if "tmux" in PEERS:
            sock = os.path.join(TMP, f"tmux-idle{count}-{r}.sock")
            for i in range(count):
                run(["tmux", "-S", sock, "-f", TMUX_CONF, "new-session", "-d", "-s", f"i{i}", "sleep 100000"])
            server = track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
            time.sleep(0.5)
            out["tmux"] = [(pss_kb(server) or 0) / count]
        if "screen" in PEERS:
            pids = []
            for i in range(count):
                name = f"idle{count}-{r}-{i}"
                run(["screen", "-c", SCREEN_CONF, "-dmS", name, "sleep", "100000"])
                wait_until(lambda: screen_pid(name) is not None, 5)
                pids.append(track(screen_pid(name)))
            time.sleep(0.5)
            out["screen"] = [sum(pss_kb(p) or 0 for p in pids) / count]
        if "dtach" in PEERS:
            pids = []
            for i in range(count):
                sock = os.path.join(TMP, f"dtach-idle{count}-{r}-{i}.sock")
                run(["dtach", "-n", sock, "sleep", "100000"])
                pids.append(track(dtach_master(sock)))
            time.sleep(0.5)
            out["dtach"] = [sum(pss_kb(p) or 0 for p in pids if p) / count]
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


def scrollback_memory(r=0):
    """PSS after a flood of 70-column lines (SCROLL_MB, so the 10,000-line scrollback
    is full): each latch build's daemon (LATCH_BIN, and LATCH_BIN_BEFORE when set, in
    the same run) and tmux's server (history-limit 10000), no client attached."""
    path = os.path.join(TMP, "lines70.txt")
    line = 0
    if not os.path.exists(path):
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
        done = os.path.join(TMP, f"sb-done-{tag}-{r}")
        sid = f"sb-{tag}-{r}"
        made = run([binary, "new", "-d", "--json", "--id", sid, "--", "sh", "-c",
                    f"cat '{path}'; : > '{done}'; exec sleep 100000"])
        v = json.loads(made.stdout)
        track(v["daemonPid"])
        track(v["childPid"])
        LATCH_SESSIONS.append((v["daemonPid"], v["childPid"], sid))
        if not wait_until(lambda: os.path.exists(done), 300, 0.02):
            raise RuntimeError(f"{tag}: flood did not finish")
        # The daemon applies its queue once the program has been quiet for 5 ms.
        time.sleep(0.3)
        out[tag] = (pss_kb(v["daemonPid"]) or 0) / 1024
        # Then after a full capture (its buffers come and go).
        full = run([binary, "peek", sid, "--full", "--plain"]).stdout
        time.sleep(0.2)
        out[f"{tag}_after_peek"] = (pss_kb(v["daemonPid"]) or 0) / 1024
        out[f"{tag}_lines"] = full.count(b"\n") + 1
    if "tmux" in PEERS:
        sock = os.path.join(TMP, f"tmux-sb{r}.sock")
        done = os.path.join(TMP, f"sb-done-tmux-{r}")
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
    """`latch ls --json` over LS_SESSIONS real sessions (daemon + sleep each), created
    LS_WORKERS at a time after quiesce() (nothing else listed), beside `tmux ls` over
    LS_SESSIONS sessions in one tmux server; per round, 3 runs of each, in turn."""
    out = {}
    procs = []
    made = 0
    pending = list(range(LS_SESSIONS))
    t0 = time.perf_counter()
    while pending or procs:
        while pending and len(procs) < LS_WORKERS:
            i = pending.pop()
            p = subprocess.Popen([LATCH, "new", "-d", "--json", "--id", f"ls{i}", "--", "sleep", "100000"],
                                 env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            procs.append((p, f"ls{i}"))
        p, sid = procs.pop(0)
        stdout, _ = p.communicate()
        if p.returncode == 0:
            v = json.loads(stdout)
            track(v["daemonPid"])
            track(v["childPid"])
            LATCH_SESSIONS.append((v["daemonPid"], v["childPid"], sid))
            made += 1
    out["sessions"] = made
    out["create_s"] = time.perf_counter() - t0
    log(f"ls: {made} latch sessions in {out['create_s']:.0f} s")
    sock = os.path.join(TMP, "tmux-ls.sock")
    if "tmux" in PEERS:
        # Batches of chained commands: one tmux client per 100 sessions.
        for first in range(0, LS_SESSIONS, 100):
            args = ["tmux", "-S", sock, "-f", TMUX_CONF]
            for i in range(first, min(first + 100, LS_SESSIONS)):
                args += ["new-session", "-d", "-s", f"ls{i}", "sleep 100000", ";"]
            run(args[:-1])
        track(int(run(["tmux", "-S", sock, "display", "-p", "#{pid}"]).stdout))
        out["tmux_sessions"] = run(["tmux", "-S", sock, "ls"]).stdout.count(b"\n")
    idle_pss_1000(out, sock)
    rounds = {"latch": [], "tmux": []}
    for r in range(ROUNDS):
        rounds["latch"].append(time_cmd([LATCH, "ls", "--json"], 3))
        if "tmux" in PEERS:
            rounds["tmux"].append(time_cmd(["tmux", "-S", sock, "ls"], 3))
    out["samples"] = rounds
    r = run([LATCH, "ls", "--json"])
    out["ls_rows"] = len(json.loads(r.stdout))
    out["ls_bytes"] = len(r.stdout)
    return out


def idle_pss_1000(out, tmux_sock):
    """Total PSS of every latch daemon made for `ls` (programs excluded), at rest, and
    of the tmux server holding as many sessions, measured side by side."""
    settle_idle()
    daemons = [d for d, _, sid in LATCH_SESSIONS if sid.startswith("ls")]
    out["latch_total_pss_mb"] = sum(pss_kb(p) or 0 for p in daemons) / 1024
    if "tmux" in PEERS and os.path.exists(tmux_sock):
        pid = int(run(["tmux", "-S", tmux_sock, "display", "-p", "#{pid}"]).stdout)
        out["tmux_total_pss_mb"] = (pss_kb(pid) or 0) / 1024
    log(f"idle PSS of {len(daemons)} sessions: latch {out['latch_total_pss_mb']:.1f} MB, tmux {out.get('tmux_total_pss_mb', 0):.1f} MB")


def settle_idle():
    """Sessions at rest: start-up allocations settled and every quiet detached
    daemon past its hibernation delay (SPEC §8, HIBERNATE_QUIET_MS)."""
    time.sleep(IDLE_SETTLE_S)


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


def med(xs):
    xs = [x for x in xs or [] if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs, nd=1, scale=1.0):
    """`median (min-max)` of per-round figures."""
    xs = [x * scale for x in xs or [] if x is not None]
    if not xs:
        return "—"
    return f"{statistics.median(xs):.{nd}f} ({min(xs):.{nd}f}–{max(xs):.{nd}f})"


def per_round(a, b):
    """Per-round ratios a[r] / b[r] (both from round r)."""
    return [x / y for x, y in zip(a or [], b or []) if x is not None and y]


def verdict(ok):
    return "—" if ok is None else ("met" if ok else "**missed**")


def main():
    log(f"peers: {', '.join(PEERS) or 'none'}; skipped: {SKIPPED or 'none'}; scratch {TMP}")
    data, size = make_data()
    log(f"data: {size / 1e6:.0f} MB of text lines")
    tp, term, echo, peek, att, cr, idle, mem50, fm, wire, ls = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
    sb = []
    try:
        if wanted("terminal"):
            term = throughput(data, size, "script")
            RESULTS["terminal"] = term
            RESULTS["terminal_clients"] = TERM_STATS
        if wanted("throughput"):
            tp = throughput(data, size)
            RESULTS["throughput"] = tp
        if wanted("echo"):
            echo = in_rounds("echo", echo_all)
        if wanted("peek"):
            peek = in_rounds("peek", peek_all)
        if wanted("attach"):
            att = attach_all()
            RESULTS["attach"] = att
            log("attach done")
        if wanted("create"):
            cr = in_rounds("create", create_all)
        if wanted("memory"):
            quiesce()
            idle = in_rounds("idle10", lambda r: (quiesce(), idle_memory(IDLE_N, r))[1])
            if not QUICK:
                quiesce()
                mem50 = {k: v[0] for k, v in idle_memory(50).items()}
                RESULTS["idle50"] = mem50
            quiesce()
            fm = flood_memory(data, size)
            RESULTS["flood_memory"] = fm
            log("flood memory done")
        if wanted("scrollback"):
            for r in range(SCROLL_ROUNDS):
                quiesce()
                sb.append(scrollback_memory(r))
                log(f"scrollback round {r}: latch {sb[-1].get('latch', 0):.1f} MB, tmux {sb[-1].get('tmux', 0):.1f} MB")
            RESULTS["scrollback_memory"] = sb
        if wanted("wire"):
            wire = wire_bench()
            RESULTS["wire"] = wire
            log("wire done")
        if wanted("ls"):
            quiesce()
            ls = ls_many()
            RESULTS["ls"] = ls
            log("ls done")
    finally:
        cleanup()
    out_path = os.environ.get("LATCH_BENCH_OUT", "/tmp/latch-bench.json")
    rows = []

    def row(figure, vals, rat, target, ok, nd=1, scale=1.0):
        cells = [spread(vals.get(k), nd, scale) if vals.get(k) else "" for k in ("raw", "latch", "tmux", "screen", "dtach")]
        rows.append((figure, *cells, rat, target, verdict(ok)))

    def rat(name, rs, nd=2):
        return f"{name} {spread(rs, nd)}" if rs else ""

    # Terminal reader (script): the throughput figures.
    if term:
        t1 = {"raw": term.get("raw"), "latch": term.get("latch1"), "tmux": term.get("tmux1"),
              "screen": term.get("screen1"), "dtach": term.get("dtach1")}
        lr, ld = per_round(term.get("latch1"), term.get("raw")), per_round(term.get("latch1"), term.get("dtach1"))
        cut = sum(1 for rnd in TERM_STATS.get("latch1", []) + TERM_STATS.get("latch2", [])
                  for c in rnd if c["cut_off"] or c["exit"] != 0)
        nclients = sum(len(rnd) for rnd in TERM_STATS.get("latch1", []) + TERM_STATS.get("latch2", []))
        RESULTS["terminal_disconnects"] = (cut, nclients)
        ok = None if not lr or not ld else (med(lr) >= 0.9 and med(ld) >= 1.0 and cut == 0)
        row("attached throughput, 1 client on a terminal read by `script` (MB/s)", t1,
            rat("/raw", lr) + "; " + rat("/dtach", ld) + f"; disconnects {cut} of {nclients} latch clients",
            ">= 0.9x raw, >= dtach, 0 disconnects", ok)
        l2 = per_round(term.get("latch2"), term.get("raw"))
        row("attached throughput, 2 clients on terminals read by `script` (MB/s)", {"latch": term.get("latch2")},
            rat("/raw", l2), ">= 0.9x raw", None if not l2 else med(l2) >= 0.9)
        row("the terminal reader's own ceiling (`cat FILE` into the pipe, no PTY; MB/s)", {"raw": term.get("reader")},
            "", "—", None)
    if echo:
        lr, lt, ls_ = per_round(echo.get("latch"), echo.get("raw")), per_round(echo.get("latch"), echo.get("tmux")), per_round(echo.get("latch"), echo.get("screen"))
        ld = per_round(echo.get("latch"), echo.get("dtach"))
        ok = None if not lr or not lt else (med(lr) <= 1.5 and med(lt) <= 1)
        row("keystroke echo through an attached client (ms, p50 per round)", echo,
            rat("/raw", lr) + "; " + rat("/tmux", lt) + "; " + rat("/screen", ls_) + "; " + rat("/dtach", ld),
            "<= tmux and <= 1.5x raw (aim: screen)", ok, 3)
        p99 = {k: [pctl(d[k], 0.99) if k in d else None for d in RESULTS.get("echo_samples", [])] for k in echo}
        row("keystroke echo, p99 per round (ms)", p99, rat("/tmux", per_round(p99.get("latch"), p99.get("tmux"))), "reported", None, 3)
    if cr:
        lsr, ld = per_round(cr.get("latch"), cr.get("screen")), per_round(cr.get("latch"), cr.get("dtach"))
        row("create detached until it answers (ms, median per round)", dict(cr, raw=cr.get("floor")),
            rat("/screen", lsr) + "; " + rat("/dtach", ld), "<= screen (aim: dtach); raw column: spawn floor",
            None if not lsr else med(lsr) <= 1, 2)
    if peek:
        lt = per_round(peek.get("latch"), peek.get("tmux"))
        row("snapshot as one CLI process: `peek` / `capture-pane -p` / `hardcopy` (ms, median per round)",
            dict(peek, raw=peek.get("floor")), rat("/tmux", lt), "<= 0.7x tmux; raw column: spawn floor",
            None if not lt else med(lt) <= 0.7, 2)
    if idle:
        lt = per_round(idle.get("latch"), idle.get("tmux"))
        row(f"idle PSS per session, {IDLE_N} sessions (KB)", idle, rat("/tmux", lt), "<= 200 KB (aim: <= tmux)",
            None if not idle.get("latch") else med(idle["latch"]) <= 200, 0)
    if mem50:
        row("idle PSS per session, 50 sessions (KB, one round)", {k: [v] for k, v in mem50.items()}, "", "—", None, 0)
    if sb:
        v = {"latch": [x.get("latch") for x in sb], "tmux": [x.get("tmux") for x in sb]}
        lt = per_round(v["latch"], v["tmux"])
        row(f"PSS after a {sb[0].get('mb', 0):.0f} MB flood of 70-column lines, scrollback 10,000 (MB)", v,
            rat("/tmux", lt), "<= tmux", None if not lt else med(lt) <= 1)
        v2 = {"latch": [x.get("latch_after_peek") for x in sb], "tmux": [x.get("tmux_after_peek") for x in sb]}
        row("the same after one full capture (MB)", v2, rat("/tmux", per_round(v2["latch"], v2["tmux"])), "—", None)
    if ls and ls.get("latch_total_pss_mb") is not None:
        rows.append((f"total PSS of {ls.get('sessions')} idle sessions: latch's daemons / tmux's one server with {ls.get('tmux_sessions')} (MB, one round)", "",
                     f"{ls['latch_total_pss_mb']:.1f}", f"{ls.get('tmux_total_pss_mb', 0):.1f}" if ls.get("tmux_total_pss_mb") is not None else "",
                     "", "", "", "<= 200 MB", verdict(ls["latch_total_pss_mb"] <= 200 if ls.get("sessions", 0) >= 1000 else None)))
    if ls:
        s_ = ls["samples"]
        lr = per_round([med(x) for x in s_["latch"]], [med(x) for x in s_["tmux"]]) if s_.get("tmux") else []
        row(f"`latch ls --json`, {ls.get('sessions')} sessions / `tmux ls`, {ls.get('tmux_sessions')} sessions in one server (ms)",
            {"latch": [med(x) for x in s_["latch"]], "tmux": [med(x) for x in s_.get("tmux", [])]},
            rat("/tmux", lr), "<= tmux ls", None if not lr else med(lr) <= 1)
    if tp:
        v = {"raw": tp.get("raw"), "latch": tp.get("latch1"), "tmux": tp.get("tmux1"), "screen": tp.get("screen1"), "dtach": tp.get("dtach1")}
        row("output throughput, 1 client on `ptyrun` (64 KiB reads; MB/s)", v,
            rat("/raw", per_round(tp.get("latch1"), tp.get("raw"))) + "; " + rat("/dtach", per_round(tp.get("latch1"), tp.get("dtach1"))), "—", None)
        row("output throughput, 0 / 2 clients on `ptyrun` (MB/s)", {"latch": tp.get("latch0"), "screen": None},
            rat("0/raw", per_round(tp.get("latch0"), tp.get("raw"))) + "; " + rat("2/raw", per_round(tp.get("latch2"), tp.get("raw"))),
            "—", None)
        rows[-1] = (rows[-1][0], "", f"{spread(tp.get('latch0'))} / {spread(tp.get('latch2'))}", "", "", "", *rows[-1][6:])
    if att:
        rows.append(("attach to first screen (ms p50 / p99, one round)", "",
                     *[f"{att[k][0]:.1f} / {att[k][1]:.1f}" if k in att else "" for k in ("latch", "tmux", "screen")],
                     "", "", "—", "—"))
    if fm:
        rows.append(("PSS during a flood, 1 ptyrun client SIGSTOPped: before / peak / after (MB)", "",
                     f"{fmt(fm.get('stall_before'))} / {fmt(fm.get('stall_peak'))} / {fmt(fm.get('stall_after'))}",
                     "", "", "", f"flood {fmt(fm.get('stall_mbps'))} MB/s", "bounded; PTY never stalls", "—"))
    if wire:
        rows.append(("keystroke echo through the daemon alone, no CLI client (µs p50 / p99)", "",
                     f"{wire.get('daemon_echo_p50_us', 0):.0f} / {wire.get('daemon_echo_p99_us', 0):.0f}",
                     "", "", "", "", "—", "—"))
        rows.append(("wire: connect vs connect+HELLO+BIND (µs p50)", "",
                     f"{wire.get('connect_p50_us', 0):.0f} vs {wire.get('hello_bind_p50_us', 0):.0f}",
                     "", "", "", "", "—", "—"))

    print()
    print(f"latch benchmarks — {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
          f"{size / 1e6:.0f} MB of text, {ROUNDS} rounds, loadavg before/after {RESULTS.get('load0', '')}{os.getloadavg()[0]:.2f}")
    if SKIPPED:
        print(f"skipped peers: {SKIPPED}")
    print("cells: median of the per-round figures (min–max over rounds); ratios: per round, then median (min–max)")
    print()
    print("| figure | raw PTY | latch | tmux | screen | dtach | latch ratio (same round) | target | verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    if term:
        for case, rnds in TERM_STATS.items():
            print(f"terminal clients {case}: " + "; ".join(
                ", ".join(f"{c['bytes'] / 1e6:.1f} MB exit {c['exit']}{' END' if c['end_seen'] else ''}{' CUT-OFF' if c['cut_off'] else ''}" for c in rnd)
                for rnd in rnds))
    if fm:
        print(f"scrollback after the flood: {fm.get('latch_scrollback_lines')} lines, ends with the data's last line: {fm.get('latch_scrollback_has_end')}; "
              f"stalled client: readers after = {fm.get('stall_readers_after')}, its exit code {fm.get('stall_client_exit')}")
    if sb:
        print(f"scrollback memory: latch kept {sb[-1].get('latch_lines')} lines, tmux history_size {sb[-1].get('tmux_history')}")
    if ls:
        print(f"ls: {ls.get('sessions')} latch sessions created in {ls.get('create_s', 0):.0f} s ({LS_WORKERS} workers); "
              f"ls --json listed {ls.get('ls_rows')} rows, {ls.get('ls_bytes')} bytes")
    with open(out_path, "w") as f:
        json.dump(RESULTS, f, indent=1)
    print(f"all samples: {out_path}; total {time.monotonic() - T_START:.0f} s")


if __name__ == "__main__":
    RESULTS["load0"] = f"{os.getloadavg()[0]:.2f} / "
    main()
