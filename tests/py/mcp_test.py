"""Drives `latch mcp` with the official MCP Python SDK's stdio client. Run by
tests/mcp.rs:

    python mcp_test.py SCENARIO LATCH_BIN ROOT [TRANSCRIPT]

Prints `ok SCENARIO`; with TRANSCRIPT, writes every call and result there.
"""

import asyncio
import base64
import json
import re
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


class Recorder:
    def __init__(self, session, path):
        self.session, self.path, self.lines = session, path, []

    async def call(self, tool, args):
        r = await self.session.call_tool(tool, args)
        text = "\n".join(c.text for c in r.content if c.type == "text")
        self.lines.append(f">>> {tool} {json.dumps(args)}")
        self.lines.append(f"<<< isError={r.isError}\n{text}\n")
        return r, text

    def save(self):
        if self.path:
            with open(self.path, "w") as f:
                f.write("\n".join(self.lines) + "\n")


def reference(text):
    m = re.search(r"session (\S+@\S+)", text)
    assert m, text
    return m.group(1)


async def session_flow(latch, root, transcript):
    params = StdioServerParameters(command=latch, args=["--root", root, "mcp"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            names = sorted(t.name for t in tools.tools)
            assert names == ["create", "kill", "list", "peek", "remove", "run", "send",
                             "status", "wait"], names
            for t in tools.tools:
                assert t.description and t.inputSchema["type"] == "object", t
            rec = Recorder(session, transcript)
            rec.lines.append(f"tools: {', '.join(names)}\n")
            r, text = await rec.call("create", {"id": "agent", "command": ["cat"]})
            assert not r.isError, text
            old = reference(text)
            r, text = await rec.call("status", {"session": old})
            cursor = json.loads(text.split("\n", 1)[1])["outputCursor"]
            r, text = await rec.call("send", {"session": old, "text": "hello from mcp",
                                              "keys": ["Enter"]})
            assert not r.isError and old in text, text
            r, text = await rec.call("wait", {"session": old, "text": "hello from mcp",
                                              "after": cursor})
            assert not r.isError, text
            r, text = await rec.call("peek", {"session": old})
            assert not r.isError and "hello from mcp" in text and old in text, text
            r, text = await rec.call("kill", {"session": old})
            assert not r.isError and old in text, text
            r, text = await rec.call("wait", {"session": old, "exit": True})
            r, text = await rec.call("remove", {"session": old})
            assert not r.isError, text
            # The id is taken by a new creation: the old reference must not reach it.
            r, text = await rec.call("create", {"id": "agent", "command": ["cat"]})
            new = reference(text)
            assert new != old, (new, old)
            r, text = await rec.call("send", {"session": old, "text": "rm -rf /"})
            assert r.isError and "replaced" in text and "Nothing was done" in text, text
            r, text = await rec.call("kill", {"session": old})
            assert r.isError and "replaced" in text, text
            r, text = await rec.call("peek", {"session": new})
            assert "rm -rf" not in text, text
            r, text = await rec.call("kill", {"session": new})
            assert not r.isError, text
            # run: a command's own output and exit code from a shell, in one call.
            r, text = await rec.call("create", {"id": "sh", "command": ["bash"]})
            shell = reference(text)
            r, text = await rec.call("run", {"session": shell,
                                             "command": "echo sum-$((2+3)); false",
                                             "timeout": 60})
            assert not r.isError and shell in text, text
            ran = json.loads(text.split("\n", 1)[1])
            assert ran["output"] == "sum-5\n" and ran["exitCode"] == 1, ran
            # peek with image: the screen as a PNG image content, named by its creation.
            r = await session.call_tool("peek", {"session": shell, "image": True})
            assert not r.isError, r
            kinds = [c.type for c in r.content]
            assert kinds == ["text", "image"], kinds
            assert shell in r.content[0].text, r.content[0].text
            assert r.content[1].mimeType == "image/png"
            png = base64.b64decode(r.content[1].data)
            assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:8]
            rec.lines.append(f"peek image: {len(png)} bytes of PNG\n")
            r, text = await rec.call("kill", {"session": shell})
            rec.save()


async def read_only(latch, root, _):
    params = StdioServerParameters(
        command=latch, args=["--root", root, "mcp", "--read-only", "--owner", "me"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            names = sorted(t.name for t in (await session.list_tools()).tools)
            assert names == ["list", "peek", "status", "wait"], names
            r = await session.call_tool("list", {})
            assert not r.isError


def main():
    scenario, latch, root = sys.argv[1:4]
    transcript = sys.argv[4] if len(sys.argv) > 4 else None
    fn = {"session": session_flow, "read_only": read_only}[scenario]
    asyncio.run(fn(latch, root, transcript))
    print(f"ok {scenario}")


if __name__ == "__main__":
    main()
