"""Plugin configs shared by the end-to-end tests."""

VIRTUAL = "my-group/production-chat"
PRIMARY = "openai-main/gpt-4o"
SECONDARY = "azure-east/gpt-4o"
PUBLIC = "public/gpt-4o-mini"
INTERNAL_KEY = "Bearer sk-openai-main"
AZURE_KEY = "azure-key-123"


def weighted_80_20(**extra) -> dict:
    """Two internal targets 80/20 behind one virtual model, plus a public model."""
    return {
        "models": [
            {"name": PRIMARY, "cluster": "openai_main", "model": "gpt-4o", "provider": "openai",
             "visibility": "internal", "headers": {"authorization": INTERNAL_KEY}},
            {"name": SECONDARY, "cluster": "azure_east", "model": "gpt-4o-2024-08-06", "provider": "azure",
             "visibility": "internal", "headers": {"api-key": AZURE_KEY, "x-target": "azure"}},
            {"name": PUBLIC, "cluster": "openai_main", "model": "gpt-4o-mini", "visibility": "public"},
        ],
        "virtual_models": [
            {"name": VIRTUAL, "model_types": ["chat", "completion", "embedding", "responses"],
             "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
                 {"target": PRIMARY, "weight": 80},
                 {"target": SECONDARY, "weight": 20}]}},
        ],
        **extra,
    }


def model_swapped(body: bytes, old: str, new: str) -> bytes:
    """`body` with the JSON string `old` replaced by `new` as Switchboard rewrites it: a shorter
    name is followed by spaces, so the body keeps its length and its content-length."""
    old_json, new_json = f'"{old}"'.encode(), f'"{new}"'.encode()
    return body.replace(old_json, new_json + b" " * max(0, len(old_json) - len(new_json)))


# A strict OpenAI mock (`stack.provider(name, **STRICT)`): it answers only its own Host and the
# gateway's key, as a real provider would, so a wrong Host or credential fails the test.
STRICT = {"strict": "openai", "host_name": "api.openai.com", "api_key": "sk-gateway"}
