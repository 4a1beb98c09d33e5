#!/usr/bin/env bash
# Rewrites the seed corpus of the file fuzz targets (record, receipt, events_line,
# defaults, final_screen, request_line) from files the real latch writes:
#
#   cargo build && fuzz/make-seeds.sh [path/to/latch]
#
# It runs `latch new -d --receipt`, `tag`, `rename`, `kill` in a temp root whose
# registry.key holds latch_registry::fuzzing::FUZZ_KEY (32 bytes of 0x5a), so the
# records verify under the key the record target uses, and captures the bridge's
# request lines through a stand-in for ssh ($LATCH_SSH). The wire targets' seeds
# are made by `LATCH_WRITE_FUZZ_SEEDS=1 cargo test -p latch-wire --test fuzz_seeds`.
# Run after a deliberate format change; registry/tests/fuzz_seeds.rs and
# client/tests/fuzz_seeds.rs fail while the seeds are stale.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
latch="$(realpath "${1:-$here/../target/x86_64-unknown-linux-gnu/debug/latch}")"
corpus="$here/corpus"
tmp="$(mktemp -d)"
root="$tmp/root"
trap '"$latch" --root "$root" kill plain >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

mkdir -m 700 "$root"
printf '\x5a%.0s' $(seq 32) >"$root/registry.key"
chmod 600 "$root/registry.key"
printf '{"legacyPolicy":"full","attachHistory":200,"detachKey":"^X"}\n' >"$root/defaults.json"
cd "$tmp"

L() { "$latch" --root "$root" "$@"; }
plain="$(L new -d --id plain --name "a name" --tag proj=latch --receipt "$tmp/plain.receipt" -- \
    sh -c 'printf "hello\033[1mbold\033[0m\n"; printf "\033]0;title\007"; printf "\a"; exec sleep 1000')"
L new -d --id owned --owner proj-abc --receipt "$tmp/owned.receipt" -- sh -c 'echo owned; exit 3' >/dev/null
L tag plain k=v build=ok >/dev/null
L rename plain renamed >/dev/null
# The title and the bell are events once the daemon has read them.
for _ in $(seq 100); do
    grep -q '"type":"bell"' "$root/plain.events.jsonl" 2>/dev/null && break
    sleep 0.1
done
L kill plain >/dev/null
for _ in $(seq 100); do
    [[ -e "$root/plain.screen" && -e "$root/owned.screen" ]] && break
    sleep 0.1
done

# A receipt of another host: the same creation, as --host would have written it.
python3 - "$tmp" <<'EOF'
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/owned.receipt"))
h = {"version": r["version"], "host": "h", **{k: v for k, v in r.items() if k != "version"}}
json.dump(h, open(f"{d}/host.receipt", "w"), indent=2)
EOF

# Request lines: ssh replaced by a script that keeps the first line it is sent.
cat >"$tmp/ssh.sh" <<EOF
#!/bin/sh
head -n 1 > "$tmp/req.\$\$"
exit 255
EOF
chmod +x "$tmp/ssh.sh"
export LATCH_SSH="$tmp/ssh.sh"
"$latch" --host h --json ls >/dev/null 2>&1 || true
"$latch" --host h peek plain >/dev/null 2>&1 || true
"$latch" --host h kill "$plain" >/dev/null 2>&1 || true
"$latch" --host h new -d --id x --tag a=b -- echo hi >/dev/null 2>&1 || true
"$latch" --host h new -d --receipt - -- true >/dev/null 2>&1 || true
"$latch" receipt verify "$tmp/host.receipt" >/dev/null 2>&1 || true
"$latch" peek --receipt "$tmp/host.receipt" owned >/dev/null 2>&1 || true
unset LATCH_SSH

for t in record receipt events_line defaults final_screen request_line; do
    mkdir -p "$corpus/$t"
    rm -f "$corpus/$t"/seed-*
done
cp "$root/plain.json" "$corpus/record/seed-killed-tagged"
cp "$root/owned.json" "$corpus/record/seed-owned-exited"
cp "$tmp/plain.receipt" "$corpus/receipt/seed-plain"
cp "$tmp/owned.receipt" "$corpus/receipt/seed-owned"
cp "$tmp/host.receipt" "$corpus/receipt/seed-host"
cp "$root/defaults.json" "$corpus/defaults/seed-all-keys"
cp "$root/plain.screen" "$corpus/final_screen/seed-killed"
cp "$root/owned.screen" "$corpus/final_screen/seed-exited"
python3 - "$root" "$tmp" "$corpus" <<'EOF'
import json, os, sys
root, tmp, corpus = sys.argv[1:]
for sid in ("plain", "owned"):
    for line in open(f"{root}/{sid}.events.jsonl", "rb").read().splitlines():
        kind = json.loads(line)["type"]
        open(f"{corpus}/events_line/seed-{sid}-{kind}", "wb").write(line)
for f in sorted(os.listdir(tmp)):
    if not f.startswith("req."):
        continue
    line = open(f"{tmp}/{f}", "rb").read().rstrip(b"\n")
    if not line:
        continue
    req = json.loads(line)
    op = next(k for k in req if k not in ("remote", "latch"))
    body = req[op]
    what = body["args"][:3] if op == "exec" else list(body)
    name = "-".join([op] + [w.strip("-") for w in what if w.strip("-")])
    open(f"{corpus}/request_line/seed-{name}", "wb").write(line)
EOF
printf '{"legacyPolicy":"off"}' >"$corpus/defaults/seed-policy"
ls "$corpus"/{record,receipt,events_line,defaults,final_screen,request_line}
