"""Rules of the vendor documents that shape a routing decision, through Envoy: which requests
have a conversation key (Zuplo model load balancing, "Sticky routing"), a round-robin place per
app (Zuplo, "Round robin"), and what a sticky session is for requests without its identifier
(TrueFoundry virtual models, "Sticky routing")."""

import requests

TARGETS = ("t1", "t2", "t3")


def model(name: str, provider: str) -> dict:
    return {"name": name, "cluster": name, "model": f"{name}-upstream", "visibility": "internal",
            "provider": provider}


def config(routing: dict, model_types: list[str], provider: str = "openai") -> dict:
    return {"models": [model(n, provider) for n in TARGETS],
            "virtual_models": [{"name": "vm", "model_types": model_types, "routing_config": routing}]}


def start(stack, routing: dict, model_types: list[str] = ["chat"], concurrency: int = 2,
          provider: str = "openai"):
    for name in TARGETS:
        stack.provider(name)
    return stack.envoy(config(routing, model_types, provider), concurrency=concurrency)


def served(session, envoy, path: str, body: dict, headers: dict | None = None) -> str:
    r = session.post(f"{envoy.url}{path}", json={"model": "vm", **body}, headers=headers or {}, timeout=10)
    assert r.status_code == 200, r.text
    return r.headers["x-switchboard-resolved-model"]


def test_an_embeddings_request_has_no_conversation_key_and_goes_round_robin(stack):
    """Zuplo, "Sticky routing": a request has no key when "It has no user message with text,
    such as an embeddings ... request"; such requests go round robin. Before, the embeddings
    `input` was read as a user message, and every request with it stuck to one model."""
    envoy = start(stack, {"type": "hash-based-routing", "hash_key": {"source": "conversation"},
                          "load_balance_targets": [{"target": n} for n in TARGETS]},
                  ["chat", "embedding"])
    with requests.Session() as s:  # one connection: one worker, one cursor
        embedded = [served(s, envoy, "/v1/embeddings", {"input": "the same text"}) for _ in range(6)]
        chats = {served(s, envoy, "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "the same text"}]}) for _ in range(6)}
    assert set(embedded) == set(TARGETS) and embedded[0] != embedded[1], embedded
    assert len(chats) == 1, "a chat with the same text keeps its conversation's model"


def test_an_anthropic_plain_text_document_is_conversation_text(stack):
    """Zuplo, "Sticky by conversation": "Only text counts, including plain-text documents".
    A conversation that opens with a text document alone has a key (before: none, so it went
    round robin); two conversations with different documents may land apart, each stays put."""
    envoy = start(stack, {"type": "hash-based-routing", "hash_key": {"source": "conversation"},
                          "load_balance_targets": [{"target": n} for n in TARGETS]},
                  provider="anthropic")

    def document(text: str) -> dict:
        block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
        return {"max_tokens": 16, "messages": [{"role": "user", "content": [block]}]}

    with requests.Session() as s:
        for text in ("The grass is green.", "The sky is blue.", "Water is wet."):
            assert len({served(s, envoy, "/v1/messages", document(text)) for _ in range(5)}) == 1, text


def test_round_robin_keeps_a_place_for_each_app(stack):
    """Zuplo, "Round robin": "a separate place in the list for each app ... a busy app can't
    skew a quiet app's rotation". One worker, so the apps share it; before, they shared its
    one cursor and the quiet app's turns followed the busy app's."""
    envoy = start(stack, {"type": "round-robin-routing",
                          "load_balance_targets": [{"target": n} for n in TARGETS]},
                  concurrency=1)
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    busy, quiet = {"authorization": "Bearer busy-app"}, {"authorization": "Bearer quiet-app"}
    with requests.Session() as s:
        turns = []
        for _ in range(6):
            for _ in range(2):
                served(s, envoy, "/v1/chat/completions", chat, busy)
            turns.append(served(s, envoy, "/v1/chat/completions", chat, quiet))
    order = [TARGETS.index(t) for t in turns]
    assert all(b == (a + 1) % 3 for a, b in zip(order, order[1:])), turns


def sticky_config(missing: str | None) -> dict:
    rule = {"ttl_seconds": 3600, "session_identifiers": [{"key": "x-user-id", "source": "headers"}]}
    if missing:
        rule["missing_identifier"] = missing
    return {"type": "weight-based-routing", "sticky_routing": rule,
            "load_balance_targets": [{"target": "t1", "weight": 50}, {"target": "t2", "weight": 50},
                                     {"target": "t3", "weight": 0}]}


def test_requests_without_the_sticky_identifier_share_a_session_unless_missing_identifier_is_none(stack):
    """TrueFoundry, "Sticky routing": a missing identifier "contributes an empty string", so
    every request without it is one session, on one target (the default); with
    `missing_identifier: "none"` such requests are not sticky and split by weight."""
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    shared = start(stack, sticky_config(None))
    none = stack.envoy(config(sticky_config("none"), ["chat"]))
    with requests.Session() as s:
        assert len({served(s, shared, "/v1/chat/completions", chat) for _ in range(12)}) == 1
        spread = [served(s, none, "/v1/chat/completions", chat) for _ in range(40)]
        # With the identifier, still sticky.
        alice = {served(s, none, "/v1/chat/completions", chat, {"x-user-id": "alice"}) for _ in range(6)}
    assert {"t1", "t2"} <= set(spread) and "t3" not in spread, spread
    assert len(alice) == 1
