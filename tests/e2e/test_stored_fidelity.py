"""Fidelity of Responses routing to the vendor documents, through Envoy, against mock providers
that store the responses they create and answer 404 for an id they do not hold, so a request
that reached the wrong account fails here as it would in production.

- Zuplo model load balancing, "Stored responses": a request that reads or continues a response
  under the provider's raw id goes to the one provider name among the models that store
  responses, or to the model a `user`/`expression` key picks, "where that caller's responses
  were created"; else 400. It is decided on the virtual model's whole list, whatever health and
  `max_targets_per_request` do to the plan, so the same request always gets the same answer.
- TrueFoundry virtual models, "Responses API conversations": a target that does not serve the
  Responses API natively gets a 400 when routing picks it ("terminal — the AI Gateway does not
  fall back"); `non_native_responses: "skip"` leaves such targets out instead.
"""

from __future__ import annotations

import time

import openai
import pytest
import requests

ID_KEYS = ["stored-fidelity-response-id-key-01"]
A, B, ROUTER = "openai-a/gpt-4o", "openai-b/gpt-4o", "router/gpt-4o"
DIRECT = "openai-a/direct"  # a public model on openai-a's account, for raw ids
CLAUDE = "anthropic/claude"
USER_HEADER = "x-end-user"


def cluster(name: str) -> str:
    return name.split("/")[0].replace("-", "_")


def models() -> list[dict]:
    return [
        {"name": A, "cluster": "openai_a", "model": "gpt-4o"},
        {"name": DIRECT, "cluster": "openai_a", "model": "gpt-4o-mini", "visibility": "public"},
        {"name": B, "cluster": "openai_b", "model": "gpt-4o"},
        {"name": ROUTER, "cluster": "router", "model": "gpt-4o", "stores_responses": False},
        {"name": CLAUDE, "cluster": "anthropic", "model": "claude-sonnet", "provider": "anthropic"},
    ]


def vm(name: str, routing: dict, **extra) -> dict:
    return {"name": name, "model_types": ["responses"], "routing_config": routing, **extra}


def round_robin(*targets: str) -> dict:
    return {"type": "round-robin-routing", "load_balance_targets": [{"target": t} for t in targets]}


def priority(*targets: str) -> dict:
    return {"type": "priority-based-routing",
            "load_balance_targets": [{"target": t, "priority": p} for p, t in enumerate(targets)]}


def config(virtual_models: list[dict], **extra) -> dict:
    return {"models": models(), "response_id_keys": ID_KEYS, "virtual_models": virtual_models,
            **extra}


@pytest.fixture
def providers(stack):
    for name in ("openai_a", "openai_b", "router", "anthropic"):
        stack.provider(name)
    return stack


def post(envoy, body: dict, user: str | None = None) -> requests.Response:
    headers = {USER_HEADER: user} if user else {}
    return requests.post(envoy.url + "/v1/responses", json=body, headers=headers, timeout=10)


def resolved(r: requests.Response) -> str | None:
    return r.headers.get("x-switchboard-resolved-model")


def raw_id_at_a(envoy) -> str:
    """A raw provider id held by openai-a's account (a direct call returns the provider's id)."""
    client = openai.OpenAI(base_url=envoy.url + "/v1", api_key="x", max_retries=0)
    raw = client.responses.create(model=DIRECT, input="hi").id
    assert raw.startswith("resp_") and not raw.startswith("resp_sb1-")
    return raw


def make_unhealthy(stack, provider: str, envoy, body: dict, user: str | None = None) -> None:
    """Two failures of `provider` (the default failure_window: 2 in 120 s) make its targets
    unhealthy; then it answers again, its records still saying unhealthy."""
    stack.providers[provider].configure(fail_status=503, fail_rate=1.0)
    for _ in range(2):
        post(envoy, body, user)
    stack.providers[provider].configure(fail_status=None)
    time.sleep(0.3)  # past each worker's cached view of the health records (health_view_ms)


# Item 1: raw ids are judged on the whole eligible list.

def test_raw_ids_reach_the_one_storing_account_whatever_max_targets_per_request_cuts(providers):
    # Round robin over a router that stores nothing and openai-a, one target per request: the
    # plan is [router] for every other request, yet openai-a's account holds the response.
    envoy = providers.envoy(config(
        [vm("team/one-store", round_robin(ROUTER, A), max_targets_per_request=1)],
        stored_responses_virtual_model="team/one-store"))
    raw = raw_id_at_a(envoy)
    for _ in range(8):
        r = post(envoy, {"model": "team/one-store", "input": "more", "previous_response_id": raw})
        assert r.status_code == 200, r.text
        assert resolved(r) == A
        r = requests.get(f"{envoy.url}/v1/responses/{raw}", timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["id"] == raw
    assert providers.providers["router"].requests() == []


def test_two_storing_accounts_stay_two_whatever_max_targets_per_request_cuts(providers):
    # A plan cut to one target shows one provider name; the list still has two, so without a
    # caller key every raw-id request is Zuplo's 400, never a guess that may land right.
    envoy = providers.envoy(config(
        [vm("team/two-accounts", round_robin(A, B), max_targets_per_request=1)]))
    raw = raw_id_at_a(envoy)
    providers.providers["openai_a"].clear()
    for _ in range(8):
        r = post(envoy, {"model": "team/two-accounts", "input": "x", "previous_response_id": raw})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "stored_response_unroutable"
    assert providers.providers["openai_a"].requests() == []
    assert providers.providers["openai_b"].requests() == []


def test_an_unhealthy_storing_target_still_gets_its_raw_ids(providers):
    # openai-a first by priority, one target per request: once openai-a is unhealthy the plan
    # is [router], which stores nothing. Raw ids still go to openai-a, which holds them.
    envoy = providers.envoy(config(
        [vm("team/priority", priority(A, ROUTER), max_targets_per_request=1)]))
    raw = raw_id_at_a(envoy)
    # Creates that store go only to openai-a: its two 503s make it unhealthy.
    make_unhealthy(providers, "openai_a", envoy, {"model": "team/priority", "input": "x"})
    r = post(envoy, {"model": "team/priority", "input": "x", "store": False})
    assert resolved(r) == ROUTER, "health now puts the router first"
    for _ in range(6):
        r = post(envoy, {"model": "team/priority", "input": "x", "previous_response_id": raw})
        assert r.status_code == 200, r.text
        assert resolved(r) == A


# Item 2: a key-picked stored response goes to the model the key picks among the storing models.

def hashed_by_user() -> dict:
    return vm("team/by-user", {"type": "hash-based-routing",
                               "hash_key": {"source": "headers", "key": USER_HEADER},
                               "load_balance_targets": [{"target": A}, {"target": B},
                                                        {"target": ROUTER}]})


def users_by_first_pick(envoy) -> dict[str, list[str]]:
    """Callers by the target their key puts first among all three (store: false creates may go
    to the router too)."""
    picks: dict[str, list[str]] = {}
    for i in range(60):
        user = f"user-{i}"
        r = post(envoy, {"model": "team/by-user", "input": "x", "store": False}, user)
        assert r.status_code == 200, r.text
        picks.setdefault(resolved(r), []).append(user)
    return picks


def create_and_raw_id(stack, envoy, user: str) -> tuple[str, str]:
    """A stored create by `user` through the virtual model: (its origin, the provider's raw id,
    read from the origin's log of a retrieve by the minted id)."""
    r = post(envoy, {"model": "team/by-user", "input": "remember this"}, user)
    assert r.status_code == 200, r.text
    origin, minted = resolved(r), r.json()["id"]
    assert minted.startswith("resp_sb1-")
    assert requests.get(f"{envoy.url}/v1/responses/{minted}", timeout=10).status_code == 200
    path = stack.providers[cluster(origin)].requests()[-1]["path"]
    return origin, path.rsplit("/", 1)[-1]


def test_a_key_picks_among_the_models_that_store_where_its_creates_went(providers):
    envoy = providers.envoy(config([hashed_by_user()], stored_responses_virtual_model="team/by-user"))
    picks = users_by_first_pick(envoy)
    assert picks.get(ROUTER), picks
    user = picks[ROUTER][0]
    # Its key puts the router first; a create that stores goes to the first that stores.
    origin, raw = create_and_raw_id(providers, envoy, user)
    assert origin in (A, B)
    for _ in range(4):
        r = post(envoy, {"model": "team/by-user", "input": "more", "previous_response_id": raw}, user)
        assert r.status_code == 200, r.text
        assert resolved(r) == origin
        r = requests.get(f"{envoy.url}/v1/responses/{raw}", headers={USER_HEADER: user}, timeout=10)
        assert r.status_code == 200, r.text
    # No key: two accounts and nothing to tell them apart.
    r = post(envoy, {"model": "team/by-user", "input": "more", "previous_response_id": raw})
    assert r.status_code == 400 and r.json()["error"]["code"] == "stored_response_unroutable"


def test_a_keys_stored_response_reaches_its_model_whatever_its_health(providers):
    envoy = providers.envoy(config([hashed_by_user()], stored_responses_virtual_model="team/by-user"))
    picks = users_by_first_pick(envoy)
    user = (picks.get(A) or picks.get(B))[0]
    origin, raw = create_and_raw_id(providers, envoy, user)
    # The origin fails twice (this caller's creates fall back elsewhere) and becomes unhealthy.
    make_unhealthy(providers, cluster(origin), envoy, {"model": "team/by-user", "input": "x"}, user)
    r = post(envoy, {"model": "team/by-user", "input": "new"}, user)
    assert r.status_code == 200 and resolved(r) != origin, "health moves this caller's creates"
    # The response lives on the origin's account: its reads and continuations still go there
    # (another account would answer 404).
    for _ in range(4):
        r = post(envoy, {"model": "team/by-user", "input": "more", "previous_response_id": raw}, user)
        assert r.status_code == 200, r.text
        assert resolved(r) == origin
        r = requests.get(f"{envoy.url}/v1/responses/{raw}", headers={USER_HEADER: user}, timeout=10)
        assert r.status_code == 200, r.text
        assert resolved(r) == origin


# Item 5: a Responses target that is not native is a 400 when routing picks it.

def non_native_vms() -> list[dict]:
    return [vm("team/claude-first", priority(CLAUDE, A)),
            vm("team/openai-first", priority(A, CLAUDE)),
            vm("team/chain", priority(A, CLAUDE, B))]


def test_a_responses_request_routed_to_a_target_that_is_not_native_gets_400(providers):
    envoy = providers.envoy(config(non_native_vms()))
    for _ in range(3):
        r = post(envoy, {"model": "team/claude-first", "input": "x"})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "unsupported_endpoint"
        assert CLAUDE in error["message"] and "natively" in error["message"]
        r = post(envoy, {"model": "team/openai-first", "input": "x"})
        assert r.status_code == 200, r.text
        assert resolved(r) == A
    assert providers.providers["anthropic"].requests() == []
    # The 400 is terminal: a fallback chain ends where it would reach such a target, and the
    # client gets the last answer (openai-b behind it is never tried).
    providers.providers["openai_a"].configure(fail_status=503, fail_rate=1.0)
    r = post(envoy, {"model": "team/chain", "input": "x"})
    assert r.status_code == 503, r.text
    assert providers.providers["openai_b"].requests() == []
    assert providers.providers["anthropic"].requests() == []
    time.sleep(0.3)
    log = envoy.log()
    assert "`team/claude-first`" in log and f"`{CLAUDE}`" in log
    assert "does not serve /v1/responses natively" in log, "the load warns about the config"


def test_non_native_responses_skip_leaves_such_targets_out(providers):
    envoy = providers.envoy(config(non_native_vms(), non_native_responses="skip"))
    for _ in range(3):
        r = post(envoy, {"model": "team/claude-first", "input": "x"})
        assert r.status_code == 200, r.text
        assert resolved(r) == A
    providers.providers["openai_a"].configure(fail_status=503, fail_rate=1.0)
    r = post(envoy, {"model": "team/chain", "input": "x"})
    assert r.status_code == 200 and resolved(r) == B, "the fallback skips the non-native target"
    assert providers.providers["anthropic"].requests() == []
    time.sleep(0.3)
    assert "does not serve /v1/responses natively" not in envoy.log()
