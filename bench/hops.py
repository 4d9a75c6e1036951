#!/usr/bin/env python3
"""Where a call's time goes: the wake-ups of one `run("true")`, hop by hop, from the kernel's scheduler.

Drives an already running heddle server at an agent's pace (a pause between calls) from this process,
records the scheduler's tracepoints of the whole host with `perf record -a` meanwhile (wake-ups,
switches, forks, execs, exits; the clock is CLOCK_MONOTONIC, the same one this script stamps its calls
with), and then reads each call's window back:

- the **critical path**: starting from the wake-up that handed the answer to this client, who woke whom,
  back to the client's request (a thread that was already running, such as a spinning pump, ends the
  walk: it took its input without a wake-up);
- each hop's **wake latency** (woken → on a CPU) and the **run** until it woke the next;
- each thread's **CPU time** in the call, and its number of wake-ups.

Only threads of the server's process tree (the pid given with `--root`, its threads and everything it
forks while recording) and this client count; other work on the host is ignored.

    python3 bench/hops.py --socket S --root SUPERVISOR_PID [--persistent] [--calls 100] [--pause-ms 50]

Needs root and `perf` (Debian's `linux-perf`). Prints Markdown tables (docs/performance.md keeps them).
"""

import argparse
import collections
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

EVENTS = [
    # `sched_waking` fires in the waker's context; `sched_wakeup` may fire on the wakee's CPU (a queued
    # remote wake-up, in the idle task's context there), which would hide who woke whom.
    "sched:sched_waking",
    "sched:sched_wakeup_new",
    "sched:sched_switch",
    "sched:sched_process_fork",
    "sched:sched_process_exec",
    "sched:sched_process_exit",
]


class Client:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.file = self.sock.makefile("rb")
        self.next_id = 0

    def call(self, method, params):
        """The result, and the monotonic times (ns) just before the send and just after the answer's line."""
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).encode() + b"\n"
        t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self.sock.sendall(line)
        raw = self.file.readline()
        t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        answer = json.loads(raw)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"], t0, t1


class Http:
    """The HTTP door (`heddle up --http ADDR`), one kept-alive connection: `POST /rpc`, or with `mcp` the
    MCP door `POST /mcp` (its session opened by `initialize`, `run` as the `run` tool)."""

    def __init__(self, addr, mcp):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host.strip("[]"), int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.mcp, self.session_id, self.next_id = mcp, None, 0

    def post(self, path, body):
        data = json.dumps(body).encode()
        head = f"POST {path} HTTP/1.1\r\nHost: heddle\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        if self.session_id:
            head += f"Mcp-Session-Id: {self.session_id}\r\n"
        t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self.sock.sendall(head.encode() + b"\r\n" + data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self.sock.recv(65536)
        head, rest = buf.split(b"\r\n\r\n", 1)
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(b":", 1) for l in head.split(b"\r\n")[1:])}
        while len(rest) < int(headers.get(b"content-length", b"0")):
            rest += self.sock.recv(65536)
        t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if b"mcp-session-id" in headers:
            self.session_id = headers[b"mcp-session-id"].decode()
        return json.loads(rest), t0, t1

    def call(self, method, params):
        self.next_id += 1
        if not self.mcp:
            answer, t0, t1 = self.post("/rpc", {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
            if "error" in answer:
                raise RuntimeError(f"{method}: {answer['error']}")
            return answer["result"], t0, t1
        if method == "session.open":
            init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hops", "version": "0"}}
            self.post(f"/mcp?cwd={params['cwd']}", {"jsonrpc": "2.0", "id": self.next_id, "method": "initialize", "params": init})
            return {"session": None}, 0, 0
        if method == "session.close":
            return {}, 0, 0
        args = {k: v for k, v in params.items() if k != "session"}
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": {"name": method, "arguments": args}}
        answer, t0, t1 = self.post("/mcp", body)
        if "error" in answer or answer["result"]["isError"]:
            raise RuntimeError(f"{method}: {answer}")
        return answer["result"]["structuredContent"], t0, t1


def descendants(root):
    """Every tid of `root`'s process tree now (processes found through their parent pid)."""
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    procs, changed = {root}, True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in procs and pid not in procs:
                procs.add(pid)
                changed = True
    tids = set()
    for pid in procs:
        try:
            tids.update(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return tids


LINE = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<tid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<time>[\d.]+):\s+(?P<event>[\w:]+):\s*(?P<rest>.*)$")


def fields(rest):
    return dict(re.findall(r"(\w+)=(\S+)", rest))


def parse(path):
    out = subprocess.run(
        ["perf", "script", "-i", path, "--ns", "-F", "comm,tid,cpu,time,event,trace"],
        check=True, capture_output=True, text=True, errors="replace",
    ).stdout
    events = []
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        t = int(round(float(m["time"]) * 1e9))
        ev = m["event"].removeprefix("sched:")
        rest = m["rest"]
        if ev == "sched_switch":
            prev, nxt = rest.split("==>")
            p, n = fields(prev), fields(nxt)
            events.append((t, ev, int(m["tid"]), m["comm"], {"prev": int(p["prev_pid"]), "prev_comm": p["prev_comm"],
                                                             "next": int(n["next_pid"]), "next_comm": n["next_comm"]}))
        else:
            f = fields(rest)
            events.append((t, ev, int(m["tid"]), m["comm"], f))
    events.sort(key=lambda e: e[0])
    return events


def label(comm, tid, client_tid):
    if tid == client_tid:
        return "client"
    return comm


def analyse(events, ours, client_tid, windows):
    ours = set(ours) | {client_tid}
    names = {}
    # Grow the set with every fork of ours, in time order.
    for t, ev, tid, comm, f in events:
        if ev == "sched_process_fork" and int(f["pid"]) in ours:
            ours.add(int(f["child_pid"]))
    calls = []
    i = 0
    for (t0, t1) in windows:
        while i < len(events) and events[i][0] < t0:
            i += 1
        j = i
        wakeups = []  # (t, waker tid, waker comm, wakee tid, wakee comm)
        first_run = {}  # wakee tid -> time it got a CPU after its last wake-up
        cpu = collections.Counter()
        wakes = collections.Counter()
        on_since = {}
        forks = execs = exits = 0
        while j < len(events) and events[j][0] <= t1 + 2000:
            t, ev, tid, comm, f = events[j]
            j += 1
            if ev in ("sched_waking", "sched_wakeup_new"):
                wakee = int(f["pid"])
                names[wakee] = f["comm"]
                if wakee in ours:
                    wakeups.append((t, tid, comm, wakee, f["comm"]))
                    wakes[label(f["comm"], wakee, client_tid)] += 1
            elif ev == "sched_switch":
                prev, nxt = f["prev"], f["next"]
                names[nxt] = f["next_comm"]
                if prev in on_since:
                    cpu[label(f["prev_comm"], prev, client_tid)] += t - on_since.pop(prev)
                if nxt in ours:
                    on_since[nxt] = t
                    first_run.setdefault(nxt, []).append(t)
            elif ev == "sched_process_fork" and tid in ours:
                forks += 1
            elif ev == "sched_process_exec" and tid in ours:
                execs += 1
            elif ev == "sched_process_exit" and tid in ours:
                exits += 1
        for tid, since in on_since.items():
            cpu[label(names.get(tid, "?"), tid, client_tid)] += max(0, t1 - since)
        # The critical path, walked back from the client's last wake-up in the window.
        path = []
        target, before = client_tid, t1 + 2000
        seen = 0
        while seen < 64:
            seen += 1
            w = [x for x in wakeups if x[3] == target and x[0] <= before]
            if not w:
                break
            t, waker, waker_comm, wakee, wakee_comm = w[-1]
            if t < t0:
                break
            runs = [r for r in first_run.get(wakee, []) if r >= t]
            on_cpu = runs[0] if runs else t
            path.append((t, label(waker_comm, waker, client_tid), label(wakee_comm, wakee, client_tid), on_cpu - t))
            if waker == client_tid:
                break
            target, before = waker, t
        path.reverse()
        calls.append({"t0": t0, "t1": t1, "path": path, "cpu": cpu, "wakes": wakes,
                      "forks": forks, "execs": execs, "exits": exits})
    return calls


def us(ns):
    return f"{ns / 1000:.1f}"


def report(calls, title):
    total = statistics.median(c["t1"] - c["t0"] for c in calls)
    print(f"\n### {title}: {len(calls)} calls, round trip p50 {us(total)} µs (client send → client woken with the answer)\n")
    shapes = collections.Counter(tuple((a, b) for _, a, b, _ in c["path"]) for c in calls)
    shape, count = shapes.most_common(1)[0]
    same = [c for c in calls if tuple((a, b) for _, a, b, _ in c["path"]) == shape]
    print(f"Critical path seen in {count} of {len(calls)} calls (p50 over those; \"at\" = since the client's send):\n")
    print("| hop | woken at (µs) | wake latency (µs) | ran before the next hop (µs) |")
    print("|---|---:|---:|---:|")
    for k, (a, b) in enumerate(shape):
        at = statistics.median(c["path"][k][0] - c["t0"] for c in same)
        lat = statistics.median(c["path"][k][3] for c in same)
        if k + 1 < len(shape):
            ran = statistics.median(c["path"][k + 1][0] - (c["path"][k][0] + c["path"][k][3]) for c in same)
        else:
            ran = statistics.median(c["t1"] - (c["path"][k][0] + c["path"][k][3]) for c in same)
        print(f"| {a} → {b} | {us(at)} | {us(lat)} | {us(ran)} |")
    first = statistics.median(c["path"][0][0] - c["t0"] for c in same) if shape else 0
    print(f"\nBefore the first hop (the client's send until a woken thread's turn): {us(first)} µs.")
    if len(shapes) > 1:
        print(f"Other paths: {', '.join(' → '.join([s[0][0]] + [b for _, b in s]) + f' ({n})' for s, n in shapes.most_common()[1:4] if s)}")
    print("\nPer thread in a call (p50 CPU time; mean wake-ups):\n")
    print("| thread | CPU µs | wake-ups |")
    print("|---|---:|---:|")
    keys = sorted({k for c in calls for k in c["cpu"]} | {k for c in calls for k in c["wakes"]},
                  key=lambda k: -statistics.median(c["cpu"].get(k, 0) for c in calls))
    for k in keys:
        cpu = statistics.median(c["cpu"].get(k, 0) for c in calls)
        w = statistics.mean(c["wakes"].get(k, 0) for c in calls)
        print(f"| {k} | {us(cpu)} | {w:.1f} |")
    print(f"\nPer call: {statistics.mean(c['forks'] for c in calls):.1f} forks, "
          f"{statistics.mean(c['execs'] for c in calls):.1f} execs, {statistics.mean(c['exits'] for c in calls):.1f} exits "
          "by the server's tree.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--root", type=int, required=True, help="the server's supervisor pid")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--pause-ms", type=int, default=50)
    ap.add_argument("--persistent", action="store_true", help="a named persistent session's run(\"true\")")
    ap.add_argument("--cmd", default="true")
    ap.add_argument("--http", metavar="ADDR", help="call through the HTTP door at ADDR (`POST /rpc`) instead of the socket")
    ap.add_argument("--mcp", action="store_true", help="with --http: through the MCP door, `POST /mcp`")
    a = ap.parse_args()
    c = Http(a.http, a.mcp) if a.http else Client(a.socket)
    params = {"cwd": "/tmp", "persistent": True} if a.persistent else {"cwd": "/tmp"}
    session = c.call("session.open", params)[0]["session"]
    for _ in range(10):
        time.sleep(a.pause_ms / 1000)
        c.call("run", {"session": session, "cmd": a.cmd})
    ours = descendants(a.root)
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        args = ["perf", "record", "-q", "-a", "-k", "mono", "-o", data]
        for e in EVENTS:
            args += ["-e", e]
        perf = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        windows, prestarted = [], 0
        for _ in range(a.calls):
            time.sleep(a.pause_ms / 1000)
            r, t0, t1 = c.call("run", {"session": session, "cmd": a.cmd})
            assert r["exit_code"] == 0, r
            prestarted += bool(r.get("prestarted"))
            windows.append((t0, t1))
        time.sleep(0.05)
        perf.send_signal(signal.SIGINT)
        perf.wait()
        ours |= descendants(a.root)
        events = parse(data)
    c.call("session.close", {"session": session})
    door = ("HTTP /mcp" if a.mcp else "HTTP /rpc") if a.http else "socket"
    kind = "persistent session" if a.persistent else f"fresh job ({prestarted} of {a.calls} on a pre-started shell)"
    load = open("/proc/loadavg").read().split()[:3]
    report(analyse(events, ours, threading_tid(), windows),
           f"run({a.cmd!r}) through the {door}, {kind}, {a.pause_ms} ms pause, load {' '.join(load)}")


def threading_tid():
    return __import__("threading").get_native_id()


if __name__ == "__main__":
    sys.exit(main())
