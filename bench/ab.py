#!/usr/bin/env python3
"""Two builds side by side: `run("true")` through each one's socket at an agent's pace, interleaved.

Starts one `heddle up` from each directory of binaries given (each with its own socket, state directory
and cgroup root under a temp dir), opens a session on each and runs `run("true")` in turn, the order
alternating every round, with `--pause-ms` before every call; prints each build's p50 and p90 and the
ratio of the second's p50 to the first's. Run it with the same directory twice for an A/A control.

    cp target/release/heddle* /tmp/before/     # build A, then build B into target/release
    sudo python3 bench/ab.py /tmp/before target/release [--calls 300] [--pause-ms 20]

Needs root (each `heddle up` owns a cgroup tree). The servers are ended with SIGINT, by their pids.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time


def call(conn, method, params):
    sock, reader = conn
    sock.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}) + "\n").encode())
    answer = json.loads(reader.readline())
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("builds", nargs=2, help="two directories holding heddle, heddle-front, heddle-supervisor, …")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--pause-ms", type=int, default=20)
    a = ap.parse_args()
    top = tempfile.mkdtemp(prefix="heddle-ab-")
    os.chmod(top, 0o755)
    servers, conns, sessions = [], [], []
    try:
        for i, build in enumerate(a.builds):
            base = os.path.join(top, str(i))
            os.makedirs(base + "/ws")
            os.chown(base + "/ws", 65534, 65534)
            env = dict(os.environ, HEDDLE_CGROUP_ROOT=f"/sys/fs/cgroup/unified/heddle-ab-{os.getpid()}-{i}")
            log = open(base + "/up.log", "w")
            servers.append(subprocess.Popen(
                [os.path.join(build, "heddle"), "up", "--socket", base + "/s.sock", "--state-dir", base + "/state"],
                env=env, stdout=log, stderr=subprocess.STDOUT))
        for i in range(len(a.builds)):
            path = os.path.join(top, str(i), "s.sock")
            deadline = time.monotonic() + 20
            while True:
                try:
                    sock = socket.socket(socket.AF_UNIX)
                    sock.connect(path)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            conns.append((sock, sock.makefile("rb")))
            sessions.append(call(conns[i], "session.open", {"cwd": os.path.join(top, str(i), "ws")})["session"])
        times = [[], []]
        for k in range(a.calls + 20):
            for i in ((0, 1) if k % 2 == 0 else (1, 0)):
                time.sleep(a.pause_ms / 1000)
                t = time.perf_counter()
                r = call(conns[i], "run", {"session": sessions[i], "cmd": "true"})
                dt = time.perf_counter() - t
                assert r["exit_code"] == 0, r
                if k >= 20:
                    times[i].append(dt * 1e6)
    finally:
        for p in servers:
            p.send_signal(signal.SIGINT)
        for p in servers:
            p.wait(timeout=30)
        shutil.rmtree(top, ignore_errors=True)
        for i in range(len(a.builds)):
            name = f"heddle-ab-{os.getpid()}-{i}"
            for d in (f"/tmp/heddle-homes-{name}", f"/tmp/heddle-sessions-{name}"):
                shutil.rmtree(d, ignore_errors=True)
    p50 = [statistics.median(t) for t in times]
    p90 = [sorted(t)[int(len(t) * 0.9)] for t in times]
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"{a.calls} calls each, {a.pause_ms} ms pause, load {load}")
    for build, m, n in zip(a.builds, p50, p90):
        print(f"  {build}: p50 {m:.1f} µs, p90 {n:.1f} µs")
    print(f"second / first, p50: {p50[1] / p50[0]:.3f}")


if __name__ == "__main__":
    main()
