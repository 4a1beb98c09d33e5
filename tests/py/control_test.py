"""Drives `latch control` from Python's standard library only, from SPEC §13 and
`latch control --schema` alone. Run by tests/control.rs:

    python control_test.py SCENARIO LATCH_BIN ROOT

Each scenario raises (exit 1) on failure and prints `ok SCENARIO` on success.
"""

import base64
import json
import os
import select
import subprocess
import sys
import time


class Control:
    """One `latch control` process: requests by id, notifications kept in order."""

    def __init__(self, latch, root, env=None):
        self.p = subprocess.Popen(
            [latch, "--root", root, "control"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self.next_id = 0
        self.buf = b""
        self.answers = {}
        self.order = []  # ids in the order they were answered
        self.notes = []

    def send_line(self, raw):
        self.p.stdin.write(raw if raw.endswith(b"\n") else raw + b"\n")
        self.p.stdin.flush()

    def request(self, method, params=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_line(json.dumps(msg).encode())
        return self.next_id

    def notify(self, method, params):
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        self.send_line(json.dumps(msg).encode())

    def read_one(self, deadline):
        """Reads one line (blocking until `deadline`); returns the message."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no line from latch control")
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise EOFError("latch control closed its stdout")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        assert msg.get("jsonrpc") == "2.0", msg
        if "id" in msg:
            self.answers[msg["id"]] = msg
            self.order.append(msg["id"])
        else:
            self.notes.append(msg)
        return msg

    def answer(self, rid, secs=60):
        deadline = time.monotonic() + secs
        while rid not in self.answers:
            self.read_one(deadline)
        return self.answers[rid]

    def call(self, method, params=None):
        a = self.answer(self.request(method, params))
        if "error" in a:
            raise AssertionError(f"{method} failed: {a['error']}")
        return a["result"]

    def note(self, pred, secs=120):
        """The first notification (kept or new) matching `pred`; removes it."""
        deadline = time.monotonic() + secs
        while True:
            for i, n in enumerate(self.notes):
                if pred(n):
                    return self.notes.pop(i)
            self.read_one(deadline)

    def initialize(self):
        r = self.call("initialize", {"minVersion": 1, "maxVersion": 1})
        assert r["protocolVersion"] == 1, r
        return r

    def close(self):
        self.p.stdin.close()
        code = self.p.wait(timeout=60)
        assert code == 0, f"latch control exited {code} on EOF"


def ref(created):
    return f"{created['id']}@{created['incarnation']}"


def out_of_order(latch, root):
    c = Control(latch, root)
    first = c.answer(c.request("list"))
    assert first["error"]["code"] == -32002, first
    c.initialize()
    s = ref(c.call("create", {"id": "ooo", "command": ["cat"]}))
    slow = c.request("wait", {"session": s, "text": "NEVER-WRITTEN", "timeout": 120})
    peek = c.request("peek", {"session": s})
    status = c.request("status", {"session": s})
    c.answer(peek)
    c.answer(status)
    assert slow not in c.answers, "the wait answered before the peek: not concurrent"
    assert c.answers[peek]["result"]["incarnation"] == s.split("@")[1]
    assert c.answers[status]["result"]["id"] == "ooo"
    # cancel ends the pending wait at once.
    c.notify("cancel", {"id": slow})
    assert c.answer(slow)["error"]["code"] == -32800
    # A stale reference is refused with latch's code 4, naming the creation.
    c.call("kill", {"session": s, "wait": True})
    c.call("remove", {"session": s})
    s2 = ref(c.call("create", {"id": "ooo", "command": ["cat"]}))
    stale = c.answer(c.request("send", {"session": s, "text": "x"}))["error"]
    assert stale["code"] == 4, stale
    assert stale["data"]["class"] == "replaced", stale
    assert stale["data"]["id"] == "ooo" and stale["data"]["incarnation"] == s.split("@")[1]
    # A misspelt precondition is refused, never ignored.
    typo = c.answer(c.request("kill", {"session": s2, "expcet": "v1.x"}))["error"]
    assert typo["code"] == -32602, typo
    c.call("kill", {"session": s2})
    c.close()


def malformed(latch, root):
    c = Control(latch, root)
    c.initialize()
    lines = []
    for i in range(100):
        kind = i % 10
        if kind == 0:
            lines.append(b"not json %d" % i)
        elif kind == 1:
            lines.append(b'{"jsonrpc":"2.0","id":%d,"method":' % i)
        elif kind == 2:
            lines.append(b"[]")
        elif kind == 3:
            lines.append(b'[{"jsonrpc":"2.0","id":%d,"method":"list"}]' % i)
        elif kind == 4:
            lines.append(b'{"id":%d,"method":"list"}' % i)
        elif kind == 5:
            lines.append(b'{"jsonrpc":"2.0","id":null,"method":"list"}')
        elif kind == 6:
            lines.append(b'{"jsonrpc":"2.0","id":"m%d","method":"list","params":[1]}' % i)
        elif kind == 7:
            lines.append(b"\xff\xfe\x00 %d" % i)
        elif kind == 8:
            lines.append(b'{"jsonrpc":"2.0","id":"n%d","method":"no-such"}' % i)
        else:
            lines.append(b"x" * (1 << 20 | 17))
    for line in lines:
        c.send_line(line)
    deadline = time.monotonic() + 60
    errors = []
    while len(errors) < 100:
        msg = c.read_one(deadline)
        assert "error" in msg, msg
        errors.append(msg["error"]["code"])
    assert set(errors) <= {-32700, -32600, -32601, -32602}, set(errors)
    assert errors.count(-32700) == 30 and errors.count(-32601) == 10, errors
    # And the connection goes on.
    assert c.call("list") == []
    c.close()


def flood(latch, root):
    """20 MB through a subscription whose reader reads nothing meanwhile."""
    mark = os.path.join(os.path.dirname(root), "flood-done")
    c = Control(latch, root)
    c.initialize()
    prog = (
        "read go; yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 20000000; "
        f"touch {mark}; read x; echo END"
    )
    s = ref(c.call("create", {"id": "flood", "command": ["sh", "-c", prog]}))
    sub = c.call("subscribe", {"session": s})
    pos = start = sub["outputCursor"]
    daemon_pid = c.call("status", {"session": s})["daemonPid"]
    c.request("send", {"session": s, "text": "\n"})
    # The subscriber stops reading: the program must still finish its 20 MB.
    deadline = time.monotonic() + 600
    while not os.path.exists(mark):
        assert time.monotonic() < deadline, "the program did not finish while unread"
        time.sleep(0.05)
    rss = lambda pid: int(
        [l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:")][0].split()[1]
    )
    daemon_kib, control_kib = rss(daemon_pid), rss(c.p.pid)
    assert daemon_kib < 64 * 1024, f"daemon RSS {daemon_kib} KiB after 20 MB"
    assert control_kib < 96 * 1024, f"latch control RSS {control_kib} KiB after 20 MB"
    c.request("send", {"session": s, "text": "\n"})
    lagged = delivered = dropped = 0
    while True:
        n = c.note(lambda n: n["method"] in ("output", "lagged", "exit", "closed", "replaced"))
        p = n["params"]
        assert p["subscription"] == sub["subscription"] and p["incarnation"] == s.split("@")[1]
        if n["method"] == "output":
            r = p["outputRange"]
            assert r["start"] == pos, (r, pos)
            data = base64.b64decode(p["data"])
            assert len(data) == r["end"] - r["start"], r
            pos = r["end"]
            delivered += len(data)
        elif n["method"] == "lagged":
            lagged += 1
            assert p["droppedBytes"] > 0, p
            pos += p["droppedBytes"]
            dropped += p["droppedBytes"]
            assert p["outputCursor"] == pos, (p, pos)
        else:
            assert n["method"] == "exit", n
            assert p["outputCursor"] == pos, (p, pos)
            break
    assert lagged > 0, "a 20 MB flood into an unread pipe was never lagged"
    assert delivered + dropped == pos - start and pos - start >= 20_000_000
    print(f"flood: {pos - start} bytes, {delivered} delivered, {dropped} dropped in "
          f"{lagged} lagged notices; daemon RSS {daemon_kib} KiB, control {control_kib} KiB")
    c.close()


def resume(latch, root):
    """A reconnect from a cursor: nothing lost, nothing doubled."""
    c = Control(latch, root)
    c.initialize()
    prog = (
        "for i in $(seq 1 2000); do echo line$i; done; read x; "
        "for i in $(seq 2001 2100); do echo line$i; done; read y"
    )
    s = ref(c.call("create", {"id": "resume", "command": ["sh", "-c", prog]}))
    c.call("wait", {"session": s, "text": "line2000", "after": 0})
    sub = c.call("subscribe", {"session": s, "since": 0})
    got, cursor = b"", 0
    while b"line1000\r\n" not in got:
        n = c.note(lambda n: n["method"] in ("output", "lagged"))
        assert n["method"] == "output", n
        r = n["params"]["outputRange"]
        assert r["start"] == cursor, (r, cursor)
        got += base64.b64decode(n["params"]["data"])
        cursor = r["end"]
    c.call("cancel", {"subscription": sub["subscription"]})
    c.close()
    # A second connection resumes at the cursor the first one reached.
    d = Control(latch, root)
    d.initialize()
    d.call("subscribe", {"session": s, "since": cursor, "format": "text"})
    d.call("send", {"session": s, "text": "\n"})
    text = ""
    while "line2100\r\n" not in text:
        n = d.note(lambda n: n["method"] in ("output", "lagged"))
        assert n["method"] == "output", n
        r = n["params"]["outputRange"]
        assert r["start"] == cursor, (r, cursor)
        text += n["params"]["text"]
        cursor = r["end"]
    whole = got.decode() + text
    lines = [l for l in whole.split("\r\n") if l.startswith("line")]
    assert lines == [f"line{i}" for i in range(1, 2101)], "output lost or doubled"
    d.call("kill", {"session": s})
    d.close()


def run(latch, root):
    """`run` types a command at bash's prompt and answers with exactly its output
    and exit code, naming the creation; a stale reference types nothing."""
    c = Control(latch, root)
    c.initialize()
    s = ref(c.call("create", {"id": "rn", "command": ["bash"]}))
    r = c.call("run", {"session": s, "command": "sh -c 'echo ran-$((6*7)); exit 7'",
                       "timeout": 60})
    assert r["exitCode"] == 7, r
    assert r["output"] == "ran-42\n", r
    assert r["id"] == "rn" and r["incarnation"] == s.split("@")[1], r
    assert r["outputRange"]["end"] >= r["outputRange"]["start"], r
    c.call("kill", {"session": s, "wait": True})
    c.call("remove", {"session": s})
    s2 = ref(c.call("create", {"id": "rn", "command": ["bash"]}))
    stale = c.answer(c.request("run", {"session": s, "command": "echo NOPE", "timeout": 30}))
    assert stale["error"]["code"] == 4, stale
    fresh = c.call("run", {"session": s2, "command": "history | grep -c NOPE", "timeout": 60})
    assert fresh["output"] == "0\n", fresh
    # A delivered send, as `latch send --when-ready --submit --wait-text`: the wait
    # starts at the typed command, so the echo (with its quotes) never matches.
    sent = c.call("send", {"session": s2, "text": "echo deliv''ered-$((1+1))",
                           "whenReady": True, "submit": True, "waitText": "delivered-2",
                           "timeout": 60})
    assert sent["confirmed"] is True and isinstance(sent["pasted"], bool), sent
    assert sent["outputRange"]["end"] > sent["outputRange"]["start"], sent
    plain = c.call("send", {"session": s2, "text": ""})
    assert "outputRange" not in plain, plain
    c.call("kill", {"session": s2})
    c.close()


def poll(what, f, secs=60):
    """A bounded poll: f() until it returns something true."""
    deadline = time.monotonic() + secs
    while True:
        v = f()
        if v:
            return v
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.02)


def create_options(latch, root):
    """`create` takes what `latch new` takes (SPEC §13.4): a restart policy, a
    parent, a resume command and a cast, each with its effect."""
    c = Control(latch, root)
    c.initialize()
    record = lambda i: json.load(open(os.path.join(root, i + ".json")))
    # restart: the program's failure starts a new creation of the id.
    first = c.call("create", {"id": "rs", "command": ["sh", "-c", "echo up; exit 3"],
                              "restart": "on-failure", "maxRestarts": 2,
                              "restartWindow": 60, "restartDelay": "10ms"})
    rec = record("rs")
    assert rec["restart"]["mode"] == "on-failure" and rec["restart"]["maxRestarts"] == 2, rec
    respawn = poll("respawn", lambda: [
        e for e in c.call("events", {"session": "rs"})["events"]
        if e["type"] == "session_respawn"
        and e["previousIncarnation"] == first["incarnation"]])
    assert respawn[0]["incarnation"] != first["incarnation"], respawn
    # Refused where `new` refuses: rm with restart, a tuning without restart.
    for bad in ({"restart": "always", "rm": True}, {"maxRestarts": 1},
                {"restart": "sometimes"}):
        a = c.answer(c.request("create", dict(bad, command=["true"])))
        assert a["error"]["code"] == 2, (bad, a)
    # withParent: the session is hung up when its parent process ends.
    parent = subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    child = ref(c.call("create", {"id": "kid", "command": ["sh", "-c", "exec sleep 600"],
                                  "withParent": parent.pid}))
    assert record("kid")["parent"], record("kid")
    assert c.call("status", {"session": child})["status"] == "running"
    parent.kill()
    parent.wait()
    ended = c.call("wait", {"session": child, "exit": True, "timeout": 60})
    assert ended["condition"] == "exit", ended
    # withParent as a REF: ends with that session.
    boss = ref(c.call("create", {"id": "boss", "command": ["sh", "-c", "exec sleep 600"]}))
    kid2 = ref(c.call("create", {"id": "kid2", "command": ["sh", "-c", "exec sleep 600"],
                                 "withParent": boss}))
    c.call("kill", {"session": boss, "wait": True})
    ended = c.call("wait", {"session": kid2, "exit": True, "timeout": 60})
    assert ended["condition"] == "exit", ended
    # resumeCommand: kept in the record for resurrect (SPEC §9.18).
    c.call("create", {"id": "rz", "command": ["sh", "-c", "exec sleep 600"],
                      "resumeCommand": "echo back"})
    assert record("rz")["resumeCommand"] == ["sh", "-c", "echo back"], record("rz")
    # cast: the daemon records the output to the file.
    cast = os.path.join(root, "..", "out.cast")
    c.call("create", {"id": "cs", "command": ["sh", "-c", "echo cast-$((40+2)); exec sleep 600"],
                      "cast": cast})
    text = poll("cast output", lambda: os.path.exists(cast)
                and "cast-42" in open(cast).read() and open(cast).read())
    header = json.loads(text.splitlines()[0])
    assert header["version"] == 2 and header["width"] == 80, header
    for i in ("rs", "kid", "kid2", "rz", "cs"):
        c.call("kill", {"session": i})
    c.close()


def kept_connections(latch, root):
    """`peek` on the connection kept for its creation (SPEC §13.4): never another
    creation's, whether the id is replaced by a new creation, restarted, or its
    program ends."""
    c = Control(latch, root)
    c.initialize()
    screen = lambda r: c.call("peek", {"session": r})
    first = ref(c.call("create", {"id": "kp", "command": ["sh", "-c", "echo first; exec cat"]}))
    poll("first", lambda: "first" in screen("kp")["screen"])
    for _ in range(3):
        a = screen("kp")
        assert a["incarnation"] == first.split("@")[1] and "first" in a["screen"], a
    c.call("kill", {"session": first, "wait": True})
    c.call("remove", {"session": first})
    second = ref(c.call("create", {"id": "kp", "command": ["sh", "-c", "echo second; exec cat"]}))
    a = poll("second", lambda: (lambda a: "second" in a["screen"] and a)(screen("kp")))
    assert a["incarnation"] == second.split("@")[1] and "first" not in a["screen"], a
    stale = c.answer(c.request("peek", {"session": first}))
    assert stale["error"]["code"] == 4, stale
    third = c.call("restart", {"session": second})
    a = poll("third", lambda: (lambda a: a["incarnation"] == third["incarnation"] and a)(
        screen("kp")))
    assert "second" in a["screen"] or a["screen"].strip() == "", a
    stale = c.answer(c.request("peek", {"session": second}))
    assert stale["error"]["code"] == 4, stale
    # The program ends: its final screen, not a kept connection's error (a peek
    # while the daemon is still finishing may be refused busy, 6: asked again).
    c.call("send", {"session": "kp", "keys": ["C-d"]})

    def final():
        a = c.answer(c.request("peek", {"session": "kp"}))
        if "error" in a:
            assert a["error"]["code"] == 6, a
            return None
        a = a["result"]
        return a.get("exitCode") is not None and a
    a = poll("final screen", final)
    assert a["incarnation"] == third["incarnation"] and a["exitCode"] == 0, a
    c.close()


def main():
    scenario, latch, root = sys.argv[1:4]
    {"out_of_order": out_of_order, "malformed": malformed, "flood": flood,
     "resume": resume, "run": run, "create_options": create_options,
     "kept_connections": kept_connections}[scenario](latch, root)
    print(f"ok {scenario}")


if __name__ == "__main__":
    main()
