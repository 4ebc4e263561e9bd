"""Zuplo's failure rules through a real Envoy (Zuplo model load balancing, "Failures and
retries"): on Responses and Messages a failed model fails the request and a slow one is
waited for (`fail_fast_endpoints`); the retry model gets more time
(`fallback_timeout_growth`), and the request fails if that runs out too
(`fallback_timeout_at_last`); a non-streamed answer is bounded whole
(`fallback_timeout_scope`). Faults come from the mock provider."""

import time

import requests

CHAT = {"messages": [{"role": "user", "content": "hello"}]}
ZUPLO_RETRY = {"attempts": 2, "delay": 50, "backoff_multiplier": 2, "on_status_codes": ["429"],
               "on_connection_failure": False}
ZUPLO_FALLBACK = ["408", "425", "429", "5xx"]


def model(name: str, **extra) -> dict:
    return {"name": name, "cluster": name, "model": f"{name}-upstream", "visibility": "internal", **extra}


def zuplo_vm(name: str, first: str, second: str, model_types: list[str], **extra) -> dict:
    """Two targets, each with Zuplo's rules as `switchboard import --from zuplo` writes them:
    every request goes to `first`, `second` is its retry model."""
    targets = [{"target": t, "weight": w, "retry_config": ZUPLO_RETRY, "fallback_status_codes": ZUPLO_FALLBACK}
               for t, w in ((first, 100), (second, 0))]
    return {"name": name, "model_types": model_types, "max_targets_per_request": 2,
            "fail_fast_endpoints": ["responses", "messages"], **extra,
            "routing_config": {"type": "weight-based-routing", "load_balance_targets": targets}}


def post(envoy, path: str, body: dict, timeout: float = 15) -> requests.Response:
    return requests.post(f"{envoy.url}{path}", json=body, timeout=timeout)


def chat(envoy, model: str = "vm", **body) -> requests.Response:
    return post(envoy, "/v1/chat/completions", {"model": model, **CHAT, **body})


def responses(envoy, model: str = "vm") -> requests.Response:
    return post(envoy, "/v1/responses", {"model": model, "input": "hello"})


def messages(envoy, model: str = "claude") -> requests.Response:
    return post(envoy, "/v1/messages", {"model": model, "max_tokens": 16, **CHAT})


def fail_fast_stack(stack, first: dict, claude_first: dict | None = None, **vm_extra):
    """OpenAI-shaped `first` and `second` under `vm` (chat and responses), Anthropic-shaped
    `c_first` and `c_second` under `claude` (messages)."""
    providers = {"first": stack.provider("first", **first), "second": stack.provider("second"),
                 "c_first": stack.provider("c_first", **(claude_first or first)),
                 "c_second": stack.provider("c_second")}
    config = {"models": [model("first"), model("second"), model("c_first", provider="anthropic"),
                         model("c_second", provider="anthropic")],
              "virtual_models": [zuplo_vm("vm", "first", "second", ["chat", "responses"], **vm_extra),
                                 zuplo_vm("claude", "c_first", "c_second", ["chat"], **vm_extra)]}
    return providers, stack.envoy(config)


def test_fail_fast_endpoints_return_a_5xx_instead_of_moving_to_the_retry_model(stack):
    p, envoy = fail_fast_stack(stack, {"fail_status": 503})

    r = responses(envoy)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["message"] == "injected failure from first"
    assert r.headers["x-switchboard-resolved-model"] == "first"
    m = messages(envoy)
    assert m.status_code == 503, m.text
    assert m.json()["type"] == "error" and m.json()["error"]["type"] == "api_error", m.text
    assert p["second"].requests() == [] and p["c_second"].requests() == []
    assert (len(p["first"].requests()), len(p["c_first"].requests())) == (1, 1), "no retry either"

    # Chat completions move to the retry model, as without the option.
    c = chat(envoy)
    assert c.status_code == 200, c.text
    assert c.headers["x-switchboard-resolved-model"] == "second"
    assert c.headers["x-switchboard-attempts"] == "2"


def test_fail_fast_endpoints_fail_on_a_408_425_or_an_unreachable_model(stack):
    p, envoy = fail_fast_stack(stack, {"fail_status": 408})
    for status in (408, 425):
        p["first"].configure(fail_status=status)
        p["c_first"].configure(fail_status=status)
        assert responses(envoy).status_code == status
        assert messages(envoy).status_code == status
    p["first"].configure(fail_status=None, drop="before-response")
    p["c_first"].configure(fail_status=None, drop="before-response")
    r = responses(envoy)
    m = messages(envoy)
    assert (r.status_code, m.status_code) == (503, 503), (r.text, m.text)
    assert "x-switchboard-resolved-model" not in r.headers, "no model answered"
    assert p["second"].requests() == [] and p["c_second"].requests() == []
    assert chat(envoy).headers["x-switchboard-resolved-model"] == "second"


def test_on_fail_fast_endpoints_a_429_is_retried_twice_then_moves_to_the_retry_model(stack):
    p, envoy = fail_fast_stack(stack, {"fail_status": 429})

    r = responses(envoy)
    m = messages(envoy)

    assert (r.status_code, m.status_code) == (200, 200), (r.text, m.text)
    assert r.headers["x-switchboard-resolved-model"] == "second"
    assert m.headers["x-switchboard-resolved-model"] == "c_second"
    assert r.headers["x-switchboard-attempts"] == m.headers["x-switchboard-attempts"] == "4"
    assert (len(p["first"].requests()), len(p["second"].requests())) == (3, 1)
    assert (len(p["c_first"].requests()), len(p["c_second"].requests())) == (3, 1)


def test_on_fail_fast_endpoints_a_slow_model_is_waited_for(stack):
    p, envoy = fail_fast_stack(stack, {"stall_ms": 900}, fallback_timeout_ms=200)

    for call in (responses, messages):
        start = time.monotonic()
        r = call(envoy)
        elapsed = time.monotonic() - start
        assert r.status_code == 200, r.text
        assert r.headers["x-switchboard-resolved-model"] in ("first", "c_first")
        assert "x-switchboard-attempts" not in r.headers
        assert elapsed >= 0.85, elapsed
    assert p["second"].requests() == [] and p["c_second"].requests() == []

    # Chat completions leave it at fallback_timeout_ms for the retry model.
    start = time.monotonic()
    c = chat(envoy)
    assert c.headers["x-switchboard-resolved-model"] == "second"
    assert time.monotonic() - start < 0.85


def priority_vm(names: list[str], **extra) -> dict:
    targets = [{"target": n, "priority": i} for i, n in enumerate(names)]
    return {"name": "vm", "model_types": ["chat"], **extra,
            "routing_config": {"type": "priority-based-routing", "load_balance_targets": targets}}


def test_fallback_timeout_growth_gives_each_next_target_more_time(stack):
    """The retry model "starts over with twice the time": the second target, answering 600 ms
    after it was asked, is given 800 ms and answers; with the same 400 ms it would be left for
    the third target too."""
    stack.provider("stuck", stall_ms=5_000)
    slower = stack.provider("slower", stall_ms=600)
    spare = stack.provider("spare")
    names = ["stuck", "slower", "spare"]
    config = {"models": [model(n) for n in names],
              "virtual_models": [priority_vm(names, fallback_timeout_ms=400, fallback_timeout_growth=2)]}
    envoy = stack.envoy(config)

    start = time.monotonic()
    r = chat(envoy)
    elapsed = time.monotonic() - start

    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "slower"
    assert r.headers["x-switchboard-attempts"] == "2"
    assert 0.95 <= elapsed < 1.2, elapsed
    assert (len(slower.requests()), len(spare.requests())) == (1, 0)


def test_with_fail_at_last_the_request_fails_when_the_retry_models_time_runs_out_too(stack):
    """Zuplo: the retry model "starts over with twice the time, and the request fails if that
    runs out too": 300 ms, then 600 ms, then a 504 in the API's shape. By default
    (`wait`) the retry model is waited for."""
    stack.provider("stuck", stall_ms=5_000)
    late = stack.provider("late", stall_ms=1_200)
    timing = {"fallback_timeout_ms": 300, "fallback_timeout_growth": 2}
    config = {"models": [model("stuck"), model("late")],
              "virtual_models": [zuplo_vm("vm", "stuck", "late", ["chat"], fallback_timeout_at_last="fail", **timing),
                                 zuplo_vm("waits", "stuck", "late", ["chat"], **timing)]}
    envoy = stack.envoy(config)

    start = time.monotonic()
    r = chat(envoy)
    elapsed = time.monotonic() - start
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "fallback_timeout"
    assert r.json()["error"]["type"] == "server_error"
    assert r.headers["x-switchboard-attempts"] == "2"
    assert "x-switchboard-resolved-model" not in r.headers
    assert 0.85 <= elapsed < 1.15, elapsed
    assert len(late.requests()) == 1

    start = time.monotonic()
    w = chat(envoy, model="waits")
    elapsed = time.monotonic() - start
    assert w.status_code == 200, w.text
    assert w.headers["x-switchboard-resolved-model"] == "late"
    assert elapsed >= 1.45, elapsed


def test_the_mock_can_send_a_non_streamed_answers_headers_before_its_body(stack):
    early = stack.provider("early", headers_first=True, ttft_ms=600)
    start = time.monotonic()
    with requests.post(f"{early.url}/v1/chat/completions", json={"model": "m", **CHAT}, stream=True,
                       timeout=10) as r:
        headers_after = time.monotonic() - start
        body = r.json()
    assert r.status_code == 200 and body["served_by"] == "early"
    assert headers_after < 0.4, headers_after
    assert time.monotonic() - start >= 0.6


def test_a_non_streamed_answer_is_bounded_whole_unless_the_scope_is_answer_start(stack):
    """Zuplo: "A request that doesn't stream gets its response only when the model finishes,
    so on chat completions and embeddings fallbackTimeoutSeconds limits the whole response."
    `early` sends its headers at once and its answer after 1 s: by default it is left at
    300 ms like a call-out would be; with `answer_start` its headers stop the time."""
    early = stack.provider("early", headers_first=True, ttft_ms=1_000)
    spare = stack.provider("spare")
    config = {"models": [model("early"), model("spare")],
              "virtual_models": [zuplo_vm("vm", "early", "spare", ["chat"], fallback_timeout_ms=300),
                                 zuplo_vm("starts", "early", "spare", ["chat"], fallback_timeout_ms=300,
                                          fallback_timeout_scope="answer_start")]}
    envoy = stack.envoy(config)

    start = time.monotonic()
    r = chat(envoy)
    elapsed = time.monotonic() - start
    assert r.status_code == 200, r.text
    assert r.headers["x-switchboard-resolved-model"] == "spare"
    assert r.headers["x-switchboard-attempts"] == "2"
    assert r.json()["served_by"] == "spare"
    assert 0.28 <= elapsed < 0.9, elapsed

    start = time.monotonic()
    s = chat(envoy, model="starts")
    assert s.status_code == 200, s.text
    assert s.headers["x-switchboard-resolved-model"] == "early"
    assert s.json()["served_by"] == "early"
    assert time.monotonic() - start >= 0.95
    assert len(spare.requests()) == 1

    # A stream is let through as it starts, whatever the scope: a long one is never cut off.
    early.configure(ttft_ms=0, token_delay_ms=150, output_tokens=4)
    start = time.monotonic()
    with requests.post(f"{envoy.url}/v1/chat/completions", json={"model": "vm", "stream": True, **CHAT},
                       stream=True, timeout=10) as streamed:
        text = streamed.text
    assert streamed.headers["x-switchboard-resolved-model"] == "early"
    assert "tok4" in text and text.rstrip().endswith("data: [DONE]"), text
    assert time.monotonic() - start >= 0.45
    assert len(spare.requests()) == 1


def test_an_answer_held_whole_keeps_its_body_and_gets_its_ids_minted(stack):
    """The held answer arrives in two parts after its headers; the client gets it whole,
    its content-length right, and on /v1/responses its id minted."""
    stack.provider("early", headers_first=True, ttft_ms=150)
    stack.provider("spare")
    config = {"models": [model("early"), model("spare")],
              "virtual_models": [zuplo_vm("vm", "early", "spare", ["chat", "responses"], fallback_timeout_ms=3_000,
                                          fail_fast_endpoints=[])]}
    envoy = stack.envoy(config)

    c = chat(envoy)
    assert c.status_code == 200, c.text
    assert c.json()["served_by"] == "early"
    assert c.headers["x-switchboard-resolved-model"] == "early"
    r = responses(envoy)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("resp_sb1-"), body["id"]
    assert r.headers["x-switchboard-resolved-model"] == "early"
