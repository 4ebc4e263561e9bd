"""Routing strategies beyond weights and priorities, through Envoy."""

import json
import time
import unicodedata

import requests

from harness import clear_of_latency_epoch_boundary

CHAT = {"messages": [{"role": "user", "content": "hello"}]}


def model(name: str) -> dict:
    return {"name": name, "cluster": name, "model": f"{name}-upstream", "visibility": "internal"}


def test_conditional_routing_picks_the_first_true_when_and_falls_back_to_the_next(stack):
    stack.provider("fast")
    stack.provider("smart", fail_status=503)
    stack.provider("eu")
    config = {"models": [model("fast"), model("smart"), model("eu")],
              "virtual_models": [{"name": "adaptive", "model_types": ["chat"], "routing_config": {
                  "type": "conditional-routing", "load_balance_targets": [
                      {"target": "fast", "when": 'request.headers["x-tier"] == "free"'},
                      {"target": "smart", "when": 'request.headers["x-tier"] == "pro"'},
                      {"target": "eu", "when": 'metadata.region in ["eu", "uk"] || request.headers["x-tier"] == "pro"'},
                  ]}}]}
    envoy = stack.envoy(config)

    def send(headers: dict) -> requests.Response:
        return requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "adaptive", **CHAT},
                             headers=headers, timeout=10)

    assert send({"x-tier": "free"}).headers["x-switchboard-resolved-model"] == "fast"
    # "pro" matches smart first; smart fails, and eu (also true for pro) takes the fallback.
    pro = send({"x-tier": "pro"})
    assert (pro.status_code, pro.headers["x-switchboard-resolved-model"], pro.headers["x-switchboard-attempts"]) == \
        (200, "eu", "2")
    assert send({"x-switchboard-metadata": '{"region": "uk"}'}).headers["x-switchboard-resolved-model"] == "eu"
    none = send({"x-tier": "enterprise"})
    assert none.status_code == 400
    assert none.json()["error"]["code"] == "no_matching_condition"


def test_round_robin_gives_equal_turns(stack):
    for name in ("r1", "r2", "r3"):
        stack.provider(name)
    config = {"models": [model(n) for n in ("r1", "r2", "r3")],
              "virtual_models": [{"name": "rr", "model_types": ["chat"], "routing_config": {
                  "type": "round-robin-routing", "load_balance_targets": [
                      {"target": "r1"}, {"target": "r2"}, {"target": "r3"}]}}]}
    envoy = stack.envoy(config)
    with requests.Session() as s:  # one connection: one worker, one cursor
        served = [s.post(f"{envoy.url}/v1/chat/completions", json={"model": "rr", **CHAT}, timeout=10)
                  .headers["x-switchboard-resolved-model"] for _ in range(30)]
    assert {n: served.count(n) for n in ("r1", "r2", "r3")} == {"r1": 10, "r2": 10, "r3": 10}
    assert all(served[i] != served[i + 1] for i in range(29)), "turns, not bursts"


def test_sticky_sessions_stay_put_and_move_to_the_target_that_worked(stack):
    a = stack.provider("a")
    b = stack.provider("b")
    config = {"models": [model("a"), model("b")],
              "virtual_models": [{"name": "chat", "model_types": ["chat"], "routing_config": {
                  "type": "weight-based-routing",
                  "sticky_routing": {"ttl_seconds": 3600,
                                     "session_identifiers": [{"key": "x-user-id", "source": "headers"}]},
                  "load_balance_targets": [{"target": "a", "weight": 50}, {"target": "b", "weight": 50}]}}]}
    envoy = stack.envoy(config)

    def served_by(user: str) -> str:
        # A new connection each time: stickiness must not depend on the worker.
        r = requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "chat", **CHAT},
                          headers={"x-user-id": user}, timeout=10)
        assert r.status_code == 200
        return r.headers["x-switchboard-resolved-model"]

    homes = {u: served_by(u) for u in (f"user-{i}" for i in range(40))}
    assert all(served_by(u) == home for u, home in homes.items() for _ in range(3))
    assert 8 <= list(homes.values()).count("a") <= 32, homes  # both targets get sessions

    # The home of one user fails: the request falls back, and the session stays where it worked.
    user, home = next(iter(homes.items()))
    other = "b" if home == "a" else "a"
    failing = a if home == "a" else b
    failing.configure(fail_status=503)
    assert served_by(user) == other
    failing.configure(fail_status=None)  # healthy again, but the session is pinned to `other`
    assert [served_by(user) for _ in range(5)] == [other] * 5
    # Other sessions on the recovered target are not moved by that pin.
    neighbours = [u for u, h in homes.items() if h == home and u != user][:5]
    assert all(served_by(u) == home for u in neighbours)


def test_two_envoys_agree_on_every_sticky_session(stack):
    for name in ("s1", "s2", "s3"):
        stack.provider(name)
    config = {"models": [model(n) for n in ("s1", "s2", "s3")],
              "virtual_models": [{"name": "chat", "model_types": ["chat"], "routing_config": {
                  "type": "weight-based-routing",
                  "sticky_routing": {"ttl_seconds": 3600,
                                     "session_identifiers": [{"key": "x-user-id", "source": "headers"},
                                                             {"key": "tenant", "source": "metadata"}]},
                  "load_balance_targets": [{"target": "s1", "weight": 50}, {"target": "s2", "weight": 30},
                                           {"target": "s3", "weight": 20}]}}]}
    first, second = stack.envoy(config), stack.envoy(config)

    def home(envoy, user: str) -> str:
        headers = {"x-user-id": user, "x-switchboard-metadata": '{"tenant": "acme"}'}
        return requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "chat", **CHAT},
                             headers=headers, timeout=10).headers["x-switchboard-resolved-model"]

    users = [f"user-{i}" for i in range(60)]
    on_first = [home(first, u) for u in users]
    assert on_first == [home(second, u) for u in users], "independent instances, same assignment"
    assert set(on_first) == {"s1", "s2", "s3"}


def test_latency_routing_keeps_each_caller_on_one_target_for_the_epoch(stack):
    stack.provider("quick", token_delay_ms=1)
    stack.provider("steady", token_delay_ms=5)
    config = {"models": [model("quick"), model("steady")],
              "virtual_models": [
                  {"name": "fastest", "model_types": ["chat"], "routing_config": {
                      "type": "latency-based-routing",
                      "load_balance_targets": [{"target": "quick"}, {"target": "steady"}]}},
                  {"name": "fastest-by-user", "model_types": ["chat"], "routing_config": {
                      "type": "latency-based-routing",
                      "caller_identifier": {"key": "x-user-id", "source": "headers"},
                      "load_balance_targets": [{"target": "quick"}, {"target": "steady"}]}}]}
    envoy = stack.envoy(config)
    clear_of_latency_epoch_boundary()

    def served_by(model_name: str, headers: dict) -> str:
        r = requests.post(f"{envoy.url}/v1/chat/completions", json={"model": model_name, **CHAT},
                          headers=headers, timeout=10)
        assert r.status_code == 200
        return r.headers["x-switchboard-resolved-model"]

    # Callers are identified by their API key by default: each stays on one target.
    homes = {k: served_by("fastest", {"authorization": f"Bearer key-{k}"}) for k in range(40)}
    assert all(served_by("fastest", {"authorization": f"Bearer key-{k}"}) == h for k, h in homes.items())
    assert set(homes.values()) == {"quick", "steady"}, "every target keeps a share of callers"
    # With a configured identity the API key does not matter, the user does.
    by_user = {served_by("fastest-by-user", {"x-user-id": "u-1", "authorization": f"Bearer {k}"})
               for k in range(10)}
    assert len(by_user) == 1


def test_hash_routing_keeps_a_conversation_on_one_model_and_keyless_requests_rotate(stack):
    for name in ("h1", "h2", "h3"):
        stack.provider(name)
    targets = [{"target": n} for n in ("h1", "h2", "h3")]
    config = {"models": [model(n) for n in ("h1", "h2", "h3")],
              "virtual_models": [
                  {"name": "by-conversation", "model_types": ["chat"], "routing_config": {
                      "type": "hash-based-routing", "hash_key": {"source": "conversation"},
                      "load_balance_targets": targets}},
                  {"name": "by-user", "model_types": ["chat"], "routing_config": {
                      "type": "hash-based-routing", "hash_key": {"source": "headers", "key": "x-end-user-id"},
                      "load_balance_targets": targets}}]}
    envoy = stack.envoy(config)

    def served_by(model_name: str, messages: list, headers: dict | None = None) -> str:
        r = requests.post(f"{envoy.url}/v1/chat/completions", json={"model": model_name, "messages": messages},
                          headers=headers or {}, timeout=10)
        assert r.status_code == 200
        return r.headers["x-switchboard-resolved-model"]

    homes = set()
    for topic in range(12):
        opening = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Topic {topic}?"}]
        first = served_by("by-conversation", opening)
        later = opening + [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Go on"}]
        assert served_by("by-conversation", later) == first, "every turn of a conversation, same model"
        homes.add(first)
    assert len(homes) >= 2, "conversations spread over the models"

    users = {u: served_by("by-user", CHAT["messages"], {"x-end-user-id": u}) for u in ("ann", "bob", "cy")}
    assert all(served_by("by-user", CHAT["messages"], {"x-end-user-id": u}) == h for u, h in users.items())
    # Keys are NFC-normalised (Zuplo model load balancing, "Sticky by expression"): a decomposed
    # spelling lands where the composed one does.
    spellings = [("Jos\u00e9", "Jose\u0301"), ("\u00c5sa", "A\u030asa"), ("\ud55c\uae00", "\u1112\u1161\u11ab\u1100\u1173\u11af"),
                 ("Zo\u00eb", "Zoe\u0308"), ("\u1ec7", "e\u0323\u0302"), ("\u00f1o", "n\u0303o")]
    composed_homes = set()
    for composed, decomposed in spellings:
        assert unicodedata.normalize("NFC", decomposed) == composed != decomposed
        home = served_by("by-user", CHAT["messages"], {"x-end-user-id": composed.encode()})
        assert served_by("by-user", CHAT["messages"], {"x-end-user-id": decomposed.encode()}) == home, composed
        composed_homes.add(home)
    assert len(composed_homes) >= 2, "the keys still spread over the models"
    with requests.Session() as s:  # no key: round robin on one worker
        keyless = [s.post(f"{envoy.url}/v1/chat/completions", json={"model": "by-user", **CHAT}, timeout=10)
                   .headers["x-switchboard-resolved-model"] for _ in range(6)]
    assert sorted(keyless) == ["h1", "h1", "h2", "h2", "h3", "h3"]


def test_complexity_routing_sends_each_tier_to_its_model_and_escalates_upward(stack):
    stack.provider("cheap")
    mid = stack.provider("mid", fail_status=503)
    stack.provider("smart")
    config = {"models": [model("cheap"), model("mid"), model("smart")],
              "virtual_models": [
                  {"name": "auto", "model_types": ["chat"], "routing_config": {
                      "type": "complexity-based-routing",
                      "load_balance_targets": [{"target": "cheap", "tier": "simple"},
                                               {"target": "mid", "tier": "medium"},
                                               {"target": "smart", "tier": "complex"}]}},
                  {"name": "auto-pinned", "model_types": ["chat"], "routing_config": {
                      "type": "complexity-based-routing",
                      "sticky_routing": {"ttl_seconds": 600,
                                         "session_identifiers": [{"key": "x-session", "source": "headers"}]},
                      "load_balance_targets": [{"target": "cheap", "tier": "simple"},
                                               {"target": "smart", "tier": "complex"}]}}]}
    envoy = stack.envoy(config)
    easy = [{"role": "user", "content": "What is the capital of France?"}]
    hard = [{"role": "user", "content": "Prove step by step, then compare the trade-off:\n```py\nx = 1\n```\n"
             + "context " * 1200}]
    medium = [{"role": "user", "content": "Why does this fail?\n```rust\nfn main() {}\n```"}]

    def send(name: str, messages: list, headers: dict | None = None) -> requests.Response:
        return requests.post(f"{envoy.url}/v1/chat/completions", json={"model": name, "messages": messages},
                             headers=headers or {}, timeout=10)

    assert send("auto", easy).headers["x-switchboard-resolved-model"] == "cheap"
    assert send("auto", hard).headers["x-switchboard-resolved-model"] == "smart"
    # The medium tier fails: escalation goes up to complex, never down to simple.
    r = send("auto", medium)
    assert (r.status_code, r.headers["x-switchboard-resolved-model"], r.headers["x-switchboard-attempts"]) == \
        (200, "smart", "2")
    assert len(mid.requests()) == 1
    # A pinned session keeps the tier of its first request.
    assert send("auto-pinned", easy, {"x-session": "s1"}).headers["x-switchboard-resolved-model"] == "cheap"
    assert send("auto-pinned", hard, {"x-session": "s1"}).headers["x-switchboard-resolved-model"] == "cheap"
    assert send("auto-pinned", hard, {"x-session": "s2"}).headers["x-switchboard-resolved-model"] == "smart"


def test_complexity_classifier_model_names_the_tier_and_a_slow_one_leaves_it_to_the_heuristic(stack):
    cheap = stack.provider("cheap")
    smart = stack.provider("smart")
    judge = stack.provider("judge", reply="complex")
    config = {"models": [model("cheap"), model("smart"), model("judge")],
              "virtual_models": [{"name": "auto", "model_types": ["chat"], "routing_config": {
                  "type": "complexity-based-routing",
                  "complexity": {"classifier_model": "judge", "classifier_timeout_ms": 300},
                  "load_balance_targets": [{"target": "cheap", "tier": "simple"},
                                           {"target": "smart", "tier": "complex"}]}}]}
    envoy = stack.envoy(config)
    easy = [{"role": "user", "content": "What is the capital of France?"}]

    def send() -> requests.Response:
        return requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "auto", "messages": easy},
                             timeout=10)

    # The heuristic would say simple; the classifier says complex, and wins.
    r = send()
    assert r.status_code == 200 and r.headers["x-switchboard-resolved-model"] == "smart"
    [asked] = judge.requests()
    question = json.loads(asked["body"])
    assert question["model"] == "judge-upstream"
    assert "capital of France" in question["messages"][1]["content"]
    # The body is rewritten after the classifier's answer, outside the request's body hook
    # (natively: in Envoy's buffer alone), to a longer name than the client's.
    [routed] = smart.requests()
    assert json.loads(routed["body"]) == {"model": "smart-upstream", "messages": easy}

    judge.configure(reply="simple")
    assert send().headers["x-switchboard-resolved-model"] == "cheap"
    assert json.loads(cheap.requests()[-1]["body"]) == {"model": "cheap-upstream", "messages": easy}

    # A classifier slower than its timeout: the heuristic decides, without waiting long.
    judge.configure(reply="complex", stall_ms=2_000)
    start = time.monotonic()
    r = send()
    assert r.headers["x-switchboard-resolved-model"] == "cheap"
    assert time.monotonic() - start < 1.5
