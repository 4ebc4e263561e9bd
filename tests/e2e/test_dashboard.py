"""The Grafana dashboard (deploy/grafana/switchboard.json) cannot drift from the code: after
traffic through a real Envoy that produces every series (a retry, a fallback, an eviction,
streams, a failed stream, sticky sessions), every series a panel or a template variable
queries is on /stats/prometheus with every label the query matches on or groups by, and
every Switchboard metric Envoy exports has a panel."""

from __future__ import annotations

import json
import re
import time

import pytest
import requests

from configs import STRICT
from harness import BUILD, ROOT, Stack
from observability import _LABEL, _SAMPLE, prometheus_text, start
from promql import read

DASHBOARD = json.loads((ROOT / "deploy" / "grafana" / "switchboard.json").read_text())
PANELS = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
VARIABLES = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

A = "prov-a/gpt-4.1:latest"
B = "prov-b/model.v2"
CHAT = "team/chat-prod"
STICKY = "team/sticky"
UPSTREAM = {"authority": "api.openai.com", "headers": {"authorization": "Bearer sk-gateway"}}


def prefix() -> str:
    """The `prefix` variable's value for the build under test."""
    options = {o["text"]: o["value"] for o in VARIABLES["prefix"]["options"]}
    return options[BUILD]


def concrete(query: str) -> str:
    """A query as Grafana sends it: the build's prefix, a rate interval, `All` for a selection."""
    query = query.replace("${prefix}", prefix()).replace("$__rate_interval", "1m")
    query = re.sub(r"\$\{?(virtual_model|target|cluster)\}?", ".*", query)
    assert "$" not in query, query
    return query


def plugin() -> dict:
    retry = {"attempts": 1, "delay": 1, "on_status_codes": [503]}
    return {
        "models": [{"name": A, "cluster": "a", "model": "gpt-a", **UPSTREAM},
                   {"name": B, "cluster": "b", "model": "gpt-b", **UPSTREAM}],
        "failure_window": {"failures": 0},  # only a Retry-After evicts: the order stays fixed
        "usage_metrics": True,
        "request_histograms": True,
        "virtual_models": [
            {"name": CHAT, "model_types": ["chat"], "routing_config": {
                "type": "priority-based-routing", "load_balance_targets": [
                    {"target": A, "priority": 0, "retry_config": retry}, {"target": B, "priority": 1}]}},
            {"name": STICKY, "model_types": ["chat"], "routing_config": {
                "type": "weight-based-routing",
                "sticky_routing": {"ttl_seconds": 3600,
                                   "session_identifiers": [{"key": "x-session", "source": "headers"}]},
                "load_balance_targets": [{"target": A, "weight": 50}, {"target": B, "weight": 50}]}},
        ],
    }


def chat(envoy, model=CHAT, stream=False, session=None) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    headers = {"x-session": session} if session else {}
    r = requests.post(f"{envoy.url}/v1/chat/completions", json=body, headers=headers, timeout=30, stream=stream)
    assert r.status_code == 200, r.text
    r.content  # read the whole answer, a stream to its end
    return r.headers["x-switchboard-resolved-model"]


def traffic(envoy, a) -> int:
    """Every kind of event a panel shows; returns the number of requests sent to CHAT."""
    sessions = [f"session-{n}" for n in range(4)]
    for _ in range(2):  # healthy: new pins, then hits
        pinned = {s: chat(envoy, STICKY, session=s) for s in sessions}
    assert set(pinned.values()) <= {A, B}
    assert {chat(envoy), chat(envoy, stream=True), chat(envoy, stream=True)} == {A}
    a.configure(stream_fault="error-after-content")  # a stream that fails after it started
    assert chat(envoy, stream=True) == A
    a.configure(stream_fault=None, fail_status=503)  # a retry and a fallback
    assert chat(envoy) == B
    for s in sessions:  # sessions pinned to a move to b
        assert chat(envoy, STICKY, session=s) == B
    a.configure(fail_status=429, retry_after="60")  # an eviction
    assert chat(envoy) == B
    return 6


def scrape_series(text: str) -> dict[str, list[frozenset[str]]]:
    """Each metric name on /stats/prometheus with the label names of each of its series."""
    out: dict[str, list[frozenset[str]]] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out.setdefault(m.group(1), []).append(frozenset(k for k, _ in _LABEL.findall(m.group(2) or "")))
    return out


@pytest.fixture(scope="module")
def exported():
    stack = Stack()
    try:
        a = stack.provider("a", **STRICT)
        stack.provider("b", **STRICT)
        envoy = start(stack, plugin())
        sent = traffic(envoy, a)
        # Histograms show after a stats flush (1 s here): wait for this one, then scrape all.
        name = f"{prefix()}_attempts_count"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            text = prometheus_text(envoy)
            if re.search(rf'^{name}{{virtual_model="{CHAT}"}} {sent}$', text, re.M):
                break
            time.sleep(0.2)
        yield scrape_series(text)
    finally:
        stack.close()


def check(query: str, series: dict[str, list[frozenset[str]]]) -> list[str]:
    """What `query` names that Envoy does not export: metrics, and labels missing from a series."""
    selectors, groupings = read(concrete(query))
    assert selectors, f"no series in {query!r}"
    problems = [f"no series {s.name}" for s in selectors if s.name not in series]
    for s in selectors:
        for labels in series.get(s.name, []):
            problems += [f"{s.name} has no label {m}" for m in s.labels - labels]
    for g in groupings:
        for name in g.metrics:
            for labels in series.get(name, []):
                problems += [f"{name} has no label {m} to group by" for m in g.labels - labels]
    return sorted(set(problems))


@pytest.mark.parametrize("panel", PANELS, ids=[p["title"] for p in PANELS])
def test_each_panel_queries_series_the_filter_exports(exported, panel):
    problems = {t["refId"]: check(t["expr"], exported) for t in panel["targets"]}
    assert not any(problems.values()), problems


def test_template_variables_list_exported_labels(exported):
    queries = [v["definition"] for v in VARIABLES.values() if v["type"] == "query"]
    assert len(queries) == 3
    for query in queries:
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", query)
        assert m, query
        expr, label = m.groups()
        assert not check(expr, exported), query
        name = read(concrete(expr))[0][0].name
        assert all(label in labels for labels in exported[name]), query


def test_every_switchboard_metric_envoy_exports_has_a_panel(exported):
    queried = {s.name for p in PANELS for t in p["targets"] for s in read(concrete(t["expr"]))[0]}
    ours = {n for n in exported if n.startswith(prefix() + "_")}
    # A histogram is queried by its buckets, or by its sum and count.
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in queried}
    missing = {n for n in ours if n not in queried and re.sub(r"_(bucket|sum|count)$", "", n) not in bases}
    assert not missing, missing
    assert len(ours) >= 15, ours


@pytest.mark.build_independent
def test_the_dashboard_is_a_grafana_model_with_a_datasource_title_and_queries_per_panel():
    assert DASHBOARD["schemaVersion"] >= 39, "Grafana 10.4 and 11 models"
    assert DASHBOARD["uid"] and DASHBOARD["title"]
    assert VARIABLES["datasource"]["type"] == "datasource" and VARIABLES["datasource"]["query"] == "prometheus"
    for name in ("virtual_model", "target", "cluster"):
        assert VARIABLES[name]["type"] == "query" and VARIABLES[name]["definition"].startswith("label_values(")
        assert VARIABLES[name]["datasource"] == DATASOURCE
    assert {o["text"] for o in VARIABLES["prefix"]["options"]} == {"wasm", "native"}
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    assert len(PANELS) >= 15
    for p in PANELS:
        assert p["title"] and p["description"], p["id"]
        assert p.get("datasource") == DATASOURCE, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t.get("datasource") == DATASOURCE and t["expr"], p["title"]
            read(concrete(t["expr"]))  # every query is one the reader checks
        pos = p["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0, p["title"]


@pytest.mark.build_independent
def test_the_promql_reader_finds_names_matchers_and_groupings():
    selectors, groupings = read('histogram_quantile(0.99, sum by (le, target) (rate(x_bucket{vm=~"a/b"}[1m])))'
                                ' / sum(rate(y[5m])) by (vm) + z')
    assert [(s.name, set(s.labels)) for s in selectors] == [("x_bucket", {"vm"}), ("y", set()), ("z", set())]
    assert [(set(g.labels), set(g.metrics)) for g in groupings] == [({"le", "target"}, {"x_bucket"}),
                                                                    ({"vm"}, {"y"})]
    with pytest.raises(ValueError):
        read("sum without (le) (x)")
    with pytest.raises(ValueError):
        read('{__name__="x"}')
    with pytest.raises(ValueError):
        read("sum(rate(x[1m])")
