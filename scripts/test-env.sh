#!/usr/bin/env bash
# Installs what the test suite drives and nobody here wrote, then leaves it where the
# tests look for it:
#   - system programs: tmux, OpenSSH (sshd and ssh), bash's peers zsh, fish and dash,
#     rsvg-convert (librsvg2-bin) and a monospace font (fonts-dejavu-core);
#   - a Python venv at target/test-venv with the official MCP Python SDK (`mcp`),
#     asciinema 2.x and html5lib.
# Tests that need the venv read its interpreter from LATCH_TEST_PYTHON (set by
# scripts/test.sh) or target/test-venv/bin/python, and fail naming this script when
# it is missing: never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v tmux >/dev/null 2>&1 || need+=(tmux)
{ command -v ssh >/dev/null 2>&1 && [ -x /usr/sbin/sshd ]; } || need+=(openssh-server openssh-client)
for shell in zsh fish dash; do
    command -v "$shell" >/dev/null 2>&1 || need+=("$shell")
done
command -v rsvg-convert >/dev/null 2>&1 || need+=(librsvg2-bin)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf ] || need+=(fonts-dejavu-core)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [[ ${#need[@]} -gt 0 ]]; then
    echo "test-env: installing ${need[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >/dev/null
fi

venv=target/test-venv
stamp="$venv/.latch-test-env-1"
if [ ! -e "$stamp" ]; then
    echo "test-env: creating $venv (mcp, asciinema 2.x, html5lib)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check 'mcp>=1.2,<2' 'asciinema>=2.4,<3' 'html5lib>=1.1'
    touch "$stamp"
fi
