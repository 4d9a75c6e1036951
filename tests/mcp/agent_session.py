"""An agent session through heddle's MCP door, driven by the official Python MCP SDK.

Run by tests/tests/mcp.rs as: python agent_session.py HEDDLE_BIN PROJECT_DIR (over `heddle mcp`, stdio),
and by tests/tests/http.rs as: python agent_session.py - PROJECT_DIR --http URL (the SDK's streamable
HTTP client against the HTTP door; URL carries `?cwd=PROJECT_DIR`).
Every step asserts what an agent would rely on; the last line printed is a JSON summary the Rust test
checks again. Exit status 0 only when every step held.
"""
import asyncio
import json
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def attr(obj, snake, camel):
    """SDK 2.x names fields in snake_case, 1.x in camelCase: read either."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


def sc(result):
    return attr(result, "structured_content", "structuredContent")


def is_error(result):
    return attr(result, "is_error", "isError")


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def session_steps(session, project, progress=True):
    summary = {}
    init = await session.initialize()
    summary["server"] = attr(init, "server_info", "serverInfo").name
    summary["protocol"] = attr(init, "protocol_version", "protocolVersion")
    assert "fresh" in (init.instructions or ""), init.instructions

    tools = {t.name: t for t in (await session.list_tools()).tools}
    for name in ["run", "wait", "kill", "output", "jobs", "keep", "describe"]:
        assert name in tools, f"tool {name} missing: {sorted(tools)}"
    assert "bash 5.2" in tools["run"].description
    assert attr(tools["run"], "input_schema", "inputSchema")["required"] == ["cmd"]
    summary["tools"] = sorted(tools)

    # A command runs; cd and an export carry into the next call.
    r = await session.call_tool("run", {"cmd": "mkdir -p sub && cd sub && export GREETING=hello && echo started"})
    t = text_of(r)
    assert not is_error(r), t
    assert t.startswith("exit 0 · ") and "started" in t, t
    assert sc(r)["exit_code"] == 0, sc(r)
    r = await session.call_tool("run", {"cmd": "pwd; echo $GREETING"})
    t = text_of(r)
    assert t.splitlines()[1:3] == [os.path.join(project, "sub"), "hello"], t
    summary["carried"] = True

    # A sleep yields; its end is announced on the next call.
    r = await session.call_tool("run", {"cmd": "sleep 1; echo woke", "yield_ms": 100})
    t = text_of(r)
    assert t.startswith("still running after"), t
    sleeper = sc(r)["job"]
    await asyncio.sleep(1.5)
    r = await session.call_tool("run", {"cmd": "true"})
    t = text_of(r)
    assert f"job {sleeper} ended: exit 0" in t and "  woke" in t, t
    summary["announced"] = sleeper

    # Progress while a call waits: the job's newest line, a few times a second at most.
    seen = []

    async def on_progress(progress, total, message):
        seen.append(message)

    r = await session.call_tool(
        "run", {"cmd": "for i in 1 2 3 4; do echo step $i; sleep 0.7; done"}, progress_callback=on_progress
    )
    assert text_of(r).startswith("exit 0"), text_of(r)
    steps = [m for m in seen if m and "step" in m]
    if progress:
        assert len(steps) >= 2, seen
        assert len(seen) <= 8, seen
    else:
        assert seen == [], seen
    summary["progress"] = steps

    # A large output: the marker names the view that shows the omitted middle.
    r = await session.call_tool("run", {"cmd": "seq 1 100000"})
    t = text_of(r)
    om = sc(r)["omitted"]
    assert om is not None and "omitted" in t, t[:500]
    first, last = om["lines"]
    assert first < 50000 < last, om
    call = om["call"]
    r = await session.call_tool("output", {"job": call["job"], "lines": [50000, 50002]})
    t = text_of(r)
    assert "50000" in t and "50002" in t, t
    summary["omitted_read"] = [first, last]

    # A job with a setsid survivor: kill takes the whole cgroup.
    r = await session.call_tool("run", {"cmd": "setsid sleep 300 & echo $! > survivor.pid; sleep 300", "yield_ms": 300})
    job = sc(r)["job"]
    assert sc(r)["state"] == "running", text_of(r)
    pid = int(open(os.path.join(project, "sub", "survivor.pid")).read())
    r = await session.call_tool("kill", {"job": job})
    t = text_of(r)
    assert sc(r)["state"] == "killed", t
    assert t.startswith("killed by"), t
    deadline = time.time() + 10
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        await asyncio.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), f"setsid survivor {pid} still alive"
    summary["killed_survivor"] = pid

    # Bad input gets a tool error the model can read, and the server keeps serving.
    r = await session.call_tool("wait", {"job": 9999})
    assert is_error(r) and "unknown_job" in text_of(r), text_of(r)
    r = await session.call_tool("jobs", {})
    t = text_of(r)
    assert t.startswith(" JOB  STATE"), t
    summary["jobs_rows"] = len(t.splitlines()) - 1
    r = await session.call_tool("describe", {})
    assert not is_error(r)
    summary["session"] = sc(r)["sessions"][0]["session"]
    return summary


async def over_http(url, project):
    try:
        from mcp.client.streamable_http import streamable_http_client as client
    except ImportError:  # SDK 1.x
        from mcp.client.streamable_http import streamablehttp_client as client
    async with client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            # A tool call with a progress token is answered as an event stream: progress, then the result.
            return await session_steps(session, project, progress=True)


async def main():
    heddle, project = sys.argv[1], sys.argv[2]
    if sys.argv[3:5] and sys.argv[3] == "--http":
        summary = await over_http(sys.argv[4], project)
    else:
        params = StdioServerParameters(command=heddle, args=["mcp", "--cwd", project], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                summary = await session_steps(session, project)
    print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
