"""Invalid plugin config is refused at load, and the log names the field path; `env_keys`
limits what `${env:NAME}` may read."""

import time

import requests

from configs import PUBLIC, weighted_80_20
from harness import BUILD, config_version
from observability import start


def test_invalid_config_is_rejected_with_the_field_path(stack):
    stack.provider("openai_main")
    stack.provider("azure_east")
    config = weighted_80_20()
    config["virtual_models"][0]["routing_config"]["load_balance_targets"][1]["weight"] = "20"

    envoy = stack.envoy(config, expect_failure=True)

    assert envoy.proc.returncode != 0
    log = envoy.log()
    assert ("virtual_models[0].routing_config.load_balance_targets[1].weight: "
            "expected an integer from 0 to 100, got \"20\"") in log, log[-3000:]


def test_unsupported_field_is_rejected_not_ignored(stack):
    stack.provider("openai_main")
    stack.provider("azure_east")
    config = weighted_80_20()
    config["models"][0]["params"] = {"api_version": "2024-06-01"}

    envoy = stack.envoy(config, expect_failure=True)

    assert "models[0].params: is not supported yet" in envoy.log()


def test_config_that_is_not_json_is_rejected(stack):
    stack.provider("openai_main")
    envoy = stack.envoy("{models: ", expect_failure=True)
    assert "the plugin config is not valid JSON" in envoy.log()


ENV_KEY = "SB_E2E_PROVIDER_KEY"
ENV_WARNING = f"reads {ENV_KEY} with no `env_keys`"


def env_config(**extra) -> dict:
    config = weighted_80_20(**extra)
    # The public model, which a client may call by name.
    config["models"][2]["headers"] = {"authorization": f"Bearer ${{env:{ENV_KEY}}}"}
    return config


def test_env_keys_refuses_a_variable_it_does_not_list(stack):
    stack.provider("openai_main")
    stack.provider("azure_east")
    config = env_config(env_keys=["OPENAI_API_KEY"])

    envoy = stack.envoy(config, expect_failure=True)

    assert envoy.proc.returncode != 0
    log = envoy.log()
    assert (f"models[2].headers.authorization: environment variable `{ENV_KEY}` is not listed "
            "in `env_keys`") in log, log[-3000:]


def test_env_references_without_env_keys_read_envoys_variables_with_a_warning_on_the_native_build(
        stack, monkeypatch):
    openai = stack.provider("openai_main")
    stack.provider("azure_east")
    monkeypatch.setenv(ENV_KEY, "sk-from-the-environment")

    def model_call(envoy):
        r = requests.post(f"{envoy.url}/v1/chat/completions", timeout=30,
                          json={"model": PUBLIC, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        return openai.requests()[-1]["headers"]["authorization"]

    def log_once_loaded(envoy, config) -> str:
        # The warning follows the load line; the log reaches its file within 100 ms.
        envoy.wait_loaded(config_version(config))
        time.sleep(0.3)
        return envoy.log()

    # The .wasm reads the VM's environment, which holds only what host_env_keys hands it.
    config = env_config()
    envoy = start(stack, config, host_env_keys=[ENV_KEY])
    assert model_call(envoy) == "Bearer sk-from-the-environment"
    log = log_once_loaded(envoy, config)
    assert (ENV_WARNING in log) == (BUILD == "native"), log[-3000:]

    config = env_config(env_keys=[ENV_KEY])
    listed = start(stack, config, host_env_keys=[ENV_KEY])
    assert model_call(listed) == "Bearer sk-from-the-environment"
    log = log_once_loaded(listed, config)
    assert "env_keys" not in log, log[-3000:]
