"""The mock provider's Responses API keeps conversation state the way OpenAI does, driven by
the real SDKs straight at the mock (no Envoy): stored responses can be retrieved, listed,
deleted and cancelled; a `previous_response_id`, `conversation` or reasoning
`encrypted_content` that another mock process produced is refused with OpenAI's own error,
so a conversation that reaches the wrong provider fails in tests as it would in production."""

from __future__ import annotations

import anthropic
import openai
import pytest
import requests

from harness import Provider

STREAM_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    *["response.output_text.delta"] * 3,
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def client(p: Provider, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=p.url + "/v1", api_key="x", max_retries=0, **kw)


def error_of(excinfo: pytest.ExceptionInfo) -> dict:
    return excinfo.value.response.json()


def test_create_answers_json_and_the_real_event_stream(stack):
    p = stack.provider("a", output_tokens=3)
    c = client(p)

    r = c.responses.create(model="gpt-test", input="hello")
    assert r.id.startswith("resp_") and len(r.id) >= len("resp_") + 24
    assert (r.object, r.status, r.model, r.store) == ("response", "completed", "gpt-test", True)
    assert r.previous_response_id is None
    assert r.output_text == "tok1 tok2 tok3 "
    assert r.output[0].id.startswith("msg_")
    assert r.usage.output_tokens == 3 and r.usage.input_tokens >= 1

    events = list(c.responses.create(model="gpt-test", input="hello", stream=True))
    assert [e.type for e in events] == STREAM_EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    created, completed = events[0].response, events[-1].response
    assert created.status == "in_progress" and completed.status == "completed"
    assert completed.id == created.id != r.id
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "tok1 tok2 tok3 "
    assert completed.output_text == "tok1 tok2 tok3 "
    assert c.responses.retrieve(completed.id).status == "completed", "a streamed response is stored"
    assert [(q["method"], q["path"]) for q in p.requests()] == [
        ("POST", "/v1/responses"), ("POST", "/v1/responses"), ("GET", f"/v1/responses/{completed.id}")]


def test_a_chain_of_turns_is_retrievable_listable_and_deletable(stack):
    p = stack.provider("a")
    c = client(p)

    first = c.responses.create(model="m", input="one", instructions="be brief")
    second = c.responses.create(model="m", input="two", previous_response_id=first.id)
    third = c.responses.create(model="m", input=[{"role": "user", "content": "three"}],
                               previous_response_id=second.id)
    assert (second.previous_response_id, third.previous_response_id) == (first.id, second.id)
    assert third.usage.input_tokens > second.usage.input_tokens > first.usage.input_tokens, \
        "earlier turns count as input"

    got = c.responses.retrieve(third.id)
    assert got.model_dump() == third.model_dump()
    assert c.responses.retrieve(first.id).instructions == "be brief"

    items = c.responses.input_items.list(third.id)
    [item] = items.data
    assert (item.type, item.role, item.content[0].text) == ("message", "user", "three")
    assert item.id.startswith("msg_")
    assert (items.first_id, items.last_id, items.has_more) == (item.id, item.id, False)

    c.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError) as e:
        c.responses.retrieve(first.id)
    assert error_of(e) == {"error": {"message": f"Response with id '{first.id}' not found.",
                                     "type": "invalid_request_error", "param": None, "code": None}}
    with pytest.raises(openai.NotFoundError):
        c.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="m", input="four", previous_response_id=first.id)
    assert c.responses.retrieve(third.id).id == third.id, "only the deleted turn is gone"

    methods = [(q["method"], q["path"].replace(first.id, "{first}").replace(third.id, "{third}"))
               for q in p.requests()[3:]]
    assert methods == [("GET", "/v1/responses/{third}"), ("GET", "/v1/responses/{first}"),
                       ("GET", "/v1/responses/{third}/input_items"), ("DELETE", "/v1/responses/{first}"),
                       ("GET", "/v1/responses/{first}"), ("DELETE", "/v1/responses/{first}"),
                       ("POST", "/v1/responses"), ("GET", "/v1/responses/{third}")]


def test_a_previous_response_of_another_mock_is_not_found(stack):
    a, b = client(stack.provider("a")), client(stack.provider("b"))
    first = a.responses.create(model="m", input="hi")

    with pytest.raises(openai.NotFoundError) as e:
        b.responses.create(model="m", input="again", previous_response_id=first.id)
    assert e.value.code == "previous_response_not_found"
    assert error_of(e) == {"error": {
        "message": f"Previous response with id '{first.id}' not found.",
        "type": "invalid_request_error", "param": "previous_response_id",
        "code": "previous_response_not_found"}}
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(first.id)
    assert a.responses.create(model="m", input="again", previous_response_id=first.id).status == "completed"


def test_reasoning_content_is_only_accepted_by_the_mock_that_sealed_it(stack):
    a, b = client(stack.provider("a")), client(stack.provider("b"))
    first = a.responses.create(model="m", input="think", store=False,
                               include=["reasoning.encrypted_content"])
    reasoning, message = first.output
    assert (reasoning.type, message.type) == ("reasoning", "message")
    assert reasoning.id.startswith("rs_") and reasoning.encrypted_content.startswith("gAAAAA")
    replay = [{"role": "user", "content": "think"}, reasoning.model_dump(exclude_none=True),
              message.model_dump(exclude_none=True), {"role": "user", "content": "go on"}]

    with pytest.raises(openai.BadRequestError) as e:
        b.responses.create(model="m", input=replay, store=False)
    assert error_of(e) == {"error": {
        "message": f"The encrypted content for item {reasoning.id} could not be verified.",
        "type": "invalid_request_error", "param": None, "code": "invalid_encrypted_content"}}

    again = a.responses.create(model="m", input=replay, store=False, include=["reasoning.encrypted_content"])
    assert again.status == "completed"
    assert again.output[0].encrypted_content != reasoning.encrypted_content

    tampered = dict(replay[1], encrypted_content=reasoning.encrypted_content[:-6] + "AAAAAA")
    with pytest.raises(openai.BadRequestError):
        a.responses.create(model="m", input=[tampered], store=False)


def test_store_false_item_references_and_conversations(stack):
    a, b = client(stack.provider("a")), client(stack.provider("b"))

    unstored = a.responses.create(model="m", input="x", store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(unstored.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.create(model="m", input="y", previous_response_id=unstored.id)

    stored = a.responses.create(model="m", input="x")
    reference = [{"type": "item_reference", "id": stored.output[0].id}]
    assert a.responses.create(model="m", input=reference).status == "completed"
    with pytest.raises(openai.NotFoundError) as e:
        b.responses.create(model="m", input=reference)
    assert (e.value.code, error_of(e)["error"]["param"]) == ("item_not_found", "input")

    conversation = a.conversations.create()
    assert conversation.id.startswith("conv_")
    turn = a.responses.create(model="m", input="x", conversation=conversation.id)
    assert turn.conversation.id == conversation.id
    with pytest.raises(openai.NotFoundError) as e:
        b.responses.create(model="m", input="x", conversation=conversation.id)
    assert error_of(e)["error"] == {
        "message": f"Conversation with id '{conversation.id}' not found.",
        "type": "invalid_request_error", "param": "conversation", "code": "conversation_not_found"}


def test_background_responses_can_be_cancelled(stack):
    p = stack.provider("a", ttft_ms=60_000)
    c = client(p)

    queued = c.responses.create(model="m", input="slow", background=True)
    assert (queued.status, queued.background) == ("queued", True)
    assert c.responses.retrieve(queued.id).status == "in_progress"
    cancelled = c.responses.cancel(queued.id)
    assert (cancelled.id, cancelled.status) == (queued.id, "cancelled")
    assert c.responses.retrieve(queued.id).status == "cancelled"

    p.configure(ttft_ms=0)
    quick = c.responses.create(model="m", input="fast", background=True)
    assert c.responses.retrieve(quick.id).output_text == "tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 "

    foreground = c.responses.create(model="m", input="now")
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.cancel(foreground.id)
    assert error_of(e)["error"]["message"] == \
        "Cannot cancel a response that was not created with background=true."
    with pytest.raises(openai.NotFoundError):
        c.responses.cancel("resp_unknown")


def test_stored_responses_through_strict_openai_and_azure(stack):
    openai_key, azure_key = "sk-strict", "azure-strict"
    strict = stack.provider("strict", strict="openai", host_name="api.openai.com", api_key=openai_key)
    c = openai.OpenAI(base_url=strict.url + "/v1", api_key=openai_key, max_retries=0,
                      default_headers={"host": "api.openai.com"})
    first = c.responses.create(model="m", input="hi")
    second = c.responses.create(model="m", input="more", previous_response_id=first.id)
    assert c.responses.retrieve(second.id).previous_response_id == first.id
    assert len(c.responses.input_items.list(second.id).data) == 1
    c.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(first.id)
    assert all(q["strict_status"] is None for q in strict.requests())

    azure = stack.provider("azure", strict="azure", host_name="res.openai.azure.com", api_key=azure_key,
                           deployment="d", api_version="2024-10-21")
    headers = {"host": "res.openai.azure.com", "api-key": azure_key}
    base = azure.url + "/openai/v1/responses"
    made = requests.post(base, json={"model": "d", "input": "hi"}, headers=headers, timeout=5).json()
    got = requests.get(f"{base}/{made['id']}/input_items", headers=headers, timeout=5)
    assert got.status_code == 200 and got.json()["object"] == "list"
    gone = requests.delete(f"{base}/{made['id']}", headers=headers, timeout=5)
    assert gone.json() == {"id": made["id"], "object": "response.deleted", "deleted": True}
    assert requests.get(f"{base}/{made['id']}", headers=headers, timeout=5).status_code == 404


def test_anthropic_count_tokens(stack):
    p = stack.provider("claude")
    c = anthropic.Anthropic(base_url=p.url, api_key="sk-ant", max_retries=0)

    counted = c.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "hello there"}])
    assert counted.input_tokens >= 1

    r = requests.post(p.url + "/v1/messages/count_tokens", json={"model": "claude-x"}, timeout=5)
    assert (r.status_code, r.json()) == (400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "messages: Field required"}})
    assert [q["path"] for q in p.requests()] == ["/v1/messages/count_tokens"] * 2
