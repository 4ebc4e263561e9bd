"""Runs one prototype scenario: mock providers, an Envoy with a config from configs/, a few
requests; prints what each provider saw, the probe's log lines and the streamed timings.

    ../.venv/bin/python run_probe.py q1|composite|aggregate|priority|headers
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(HERE))
from harness import ENVOY_BIN, free_ports, start_provider, stop_process  # noqa: E402
from pb_value import b64  # noqa: E402

PROBE_WASM = HERE / "attempt-probe" / "target" / "wasm32-wasip1" / "release" / "attempt_probe.wasm"
BODY = {"model": "virtual", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
STREAM_FLAGS = {"ttft_ms": 250, "token_delay_ms": 250, "output_tokens": 20}
TEMPLATES = {"q1": "q1-upstream-wasm.yaml", "composite": "q2-composite.yaml",
             "aggregate": "q2-aggregate.yaml", "priority": "q2-priority-group.yaml",
             "headers": "q3-retry-headers.yaml", "order": "q4-order.yaml", "clusterheader": "q5-cluster-header.yaml"}


def render(template: str, values: dict) -> str:
    text = (HERE / "configs" / template).read_text()
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", str(value))
    return text


def timed_request(port: int, headers: dict, body: dict) -> dict:
    """Sends one request; returns status, the time of the first content chunk and of the end."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    start = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps(body, separators=(",", ":")),
                 {"content-type": "application/json", **headers})
    resp = conn.getresponse()
    first = None
    data = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        data += chunk
        if first is None and b"tok" in data:
            first = time.monotonic() - start
    return {"status": resp.status, "first_content_s": first, "total_s": time.monotonic() - start,
            "x-probe-attempt": resp.getheader("x-probe-attempt"), "served_by": served_by(data),
            "bytes": len(data)}


def served_by(data: bytes) -> str | None:
    text = data.decode(errors="replace")
    marker = '"served_by":"'
    i = text.find(marker)
    return text[i + len(marker):text.find('"', i + len(marker))] if i >= 0 else text[:120]


def seen(provider) -> list[dict]:
    keep = ("x-envoy-attempt-count", "authorization", "x-probe-cluster", "x-envoy-max-retries",
            "x-envoy-retry-on", "x-sb-groups")
    out = []
    for r in provider.requests():
        body = r.get("body") or ""
        model = json.loads(body).get("model") if body.startswith("{") else body[:40]
        out.append({"authority": r["authority"], "path": r["path"], "query": r.get("query"), "model": model,
                    **{k: v for k, v in r["headers"].items() if k in keep}})
    return out


def main(scenario: str) -> None:
    listen, admin, dead = free_ports(3)  # nothing listens on `dead`
    fail = start_provider("fail", fail_status=503)
    ok = start_provider("ok", **STREAM_FLAGS)
    ok2 = start_provider("ok2", **STREAM_FLAGS)
    # 200, the opening chunk, then an in-stream error before any content.
    fault = start_provider("fault", stream_fault="error-before-content", ttft_ms=300)
    work = Path(tempfile.mkdtemp(prefix="router-proto-"))
    cfg = work / "envoy.yaml"
    cfg.write_text(render(TEMPLATES[scenario], {"LISTEN": listen, "ADMIN": admin, "P_FAIL": fail.port,
                                                "P_OK": ok.port, "P_OK2": ok2.port, "P_FAULT": fault.port, "P_DEAD": dead,
                                                "PROBE_WASM": PROBE_WASM}))
    log = work / "envoy.log"
    envoy = subprocess.Popen([str(ENVOY_BIN), "-c", str(cfg), "--concurrency", "1",
                              "--disable-hot-restart", "--log-level", "warning",
                              "--component-log-level", "wasm:info,router:debug",
                              "--file-flush-interval-msec", "100", "--log-path", str(log)])
    try:
        wait_ready(admin)
        for name, headers in REQUESTS[scenario]:
            for p in (fail, ok, ok2, fault):
                p.clear()
            result = timed_request(listen, headers, BODY)
            print(f"== {name}: {json.dumps(result)}")
            for p in (fail, ok, ok2, fault):
                for r in seen(p):
                    print(f"   {p.name} saw {json.dumps(r)}")
        time.sleep(0.3)
        lines = [ln for ln in log.read_text().splitlines()
                 if "probe" in ln or "error" in ln or "critical" in ln]
        print("-- envoy log (probe/error lines):")
        for ln in lines[:60]:
            print("  ", ln[ln.find("]", 30) + 1:][:400])
        print("-- config:", cfg)
    finally:
        stop_process(envoy)
        for p in (fail, ok, ok2, fault):
            p.stop()


def wait_ready(admin: int) -> None:
    for _ in range(100):
        try:
            c = http.client.HTTPConnection("127.0.0.1", admin, timeout=1)
            c.request("GET", "/ready")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("envoy did not become ready")


C = "x-switchboard-cluster"


def groups(*clusters: str) -> str:
    """A per-request priority-group list, one single-cluster group per attempt, in order."""
    return b64([{"name": f"g{i}", "clusters": [{"cluster_name": c, "weight": 1}]}
                for i, c in enumerate(clusters)])


REQUESTS = {
    "q1": [("fail cluster, 2 retries in-cluster", {C: "fail"}),
           ("ok cluster", {C: "ok"})],
    "composite": [("composite [fail, ok]", {C: "chain_fail_ok"}),
                  ("composite [ok, fail] (healthy path)", {C: "chain_ok_fail"}),
                  ("composite [fail, fail, ok2]", {C: "chain_fail_fail_ok2"})],
    "aggregate": [("aggregate [fail, ok]", {C: "agg_fail_ok"})],
    "priority": [("priority groups, static order [fail, ok]", {}),
                 ("override [ok2, ok] by metadata", {"x-sb-groups": groups("ok2", "ok")}),
                 ("override [fail, ok2] by metadata", {"x-sb-groups": groups("fail", "ok2")}),
                 ("override [ok2, ok], then a Wasm header change clears the route cache",
                  {"x-sb-groups": groups("ok2", "ok"), "x-probe-cluster-pick": "-"}),
                 ("override [fail, fail, ok2], cache cleared",
                  {"x-sb-groups": groups("fail", "fail", "ok2"), "x-probe-cluster-pick": "-"}),
                 ("override [fault, ok2]: a 200 with an error before content, held and turned 503",
                  {"x-sb-groups": groups("fault", "ok2"), "x-probe-cluster-pick": "-"}),
                 ("override [dead, ok2]: connection refused, then a stream",
                  {"x-sb-groups": groups("dead", "ok2"), "x-probe-cluster-pick": "-"})],
    "clusterheader": [("cluster header fail, next [fail, ok2]", {C: "fail", "x-probe-next": "fail,ok2"}),
                      ("cluster header fail, next [fail, fail, ok]", {C: "fail", "x-probe-next": "fail,fail,ok"})],
    "order": [("wasm sets groups [ok2, ok] before header_to_metadata", {"x-probe-groups-src": groups("ok2", "ok")}),
              ("wasm sets groups [fail, ok2]", {"x-probe-groups-src": groups("fail", "ok2")}),
              ("wasm sets groups [fail, ok2], per-try 1000 ms (ok2 streams 5 s)",
               {"x-probe-groups-src": groups("fail", "ok2"), "x-probe-per-try": "1000"}),
              ("wasm sets groups [dead, ok2]", {"x-probe-groups-src": groups("dead", "ok2")})],
    "headers": [("no retry headers (route has no retry_policy)", {C: "fail"}),
                ("filter sets x-envoy-max-retries=2", {C: "fail", "x-probe-retries": "2"}),
                ("client sends x-envoy-max-retries=2 itself",
                 {C: "fail", "x-envoy-max-retries": "2", "x-envoy-retry-on": "5xx"})],
}

if __name__ == "__main__":
    main(sys.argv[1])
