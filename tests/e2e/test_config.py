"""Invalid plugin config is refused at load, and the log names the field path."""

from configs import weighted_80_20


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
