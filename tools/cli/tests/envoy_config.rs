//! `switchboard envoy-config`: the router path (`stream_fallbacks: "router"`) added to a
//! bootstrap. tests/e2e/test_envoy_configs.py has Envoy validate the output.

mod common;

use common::{run, temp};
use serde_json::{json, Value};
use switchboard::core::router_path::{
    GROUPS_HEADER, GROUPS_KEY, GROUPS_NAMESPACE, REROUTE_ROOT_ID, ROUTE_HEADER, ROUTE_VALUE,
    UPSTREAM_ROOT_ID,
};

/// Two virtual models: `fast` takes the router path over clusters `tls` and `legacy`; `slow`
/// (call-outs) is the only one naming `plain`.
fn plugin(fast: &str) -> String {
    format!(
        r#"{{"max_request_body_bytes": 1048576,
        "models": [{{"name": "a", "cluster": "tls", "model": "m"}},
                   {{"name": "b", "cluster": "legacy", "model": "m"}},
                   {{"name": "c", "cluster": "plain", "model": "m"}}],
        "virtual_models": [
          {{"name": "fast", "model_types": ["chat"], {fast}
            "routing_config": {{"type": "priority-based-routing", "load_balance_targets": [
              {{"target": "a", "priority": 0}}, {{"target": "b", "priority": 1}}]}}}},
          {{"name": "slow", "model_types": ["chat"],
            "routing_config": {{"type": "weight-based-routing", "load_balance_targets": [
              {{"target": "c", "weight": 100}}]}}}}]}}"#
    )
}

const ROUTER: &str = r#""stream_fallbacks": "router","#;

/// A bootstrap in YAML, the Switchboard filter's configuration being `config`, and
/// `route_config` the HCM's route settings.
fn bootstrap(filter: &str, route_config: &str) -> String {
    format!(
        r#"static_resources:
  listeners:
  - name: main
    address: {{socket_address: {{address: 127.0.0.1, port_value: 10000}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
{route_config}
          http_filters:
{filter}
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: tls
    type: LOGICAL_DNS
    load_assignment:
      cluster_name: tls
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: api.example.com, port_value: 443}}}}}}}}]}}]
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        auto_config: {{http2_protocol_options: {{}}}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: api.example.com
  - name: legacy
    http2_protocol_options: {{max_concurrent_streams: 10}}
    load_assignment:
      cluster_name: legacy
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 8001}}}}}}}}]}}]
  - name: plain
    load_assignment:
      cluster_name: plain
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 8002}}}}}}}}]}}]
"#
    )
}

fn wasm_filter(config: &str) -> String {
    let value = serde_json::to_string(&Value::String(config.replace('\n', " "))).unwrap();
    format!(
        r#"          - name: switchboard
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: switchboard
                root_id: switchboard
                allow_on_headers_stop_iteration: true
                failure_policy: FAIL_OPEN
                vm_config:
                  vm_id: switchboard
                  runtime: envoy.wasm.runtime.v8
                  code: {{local: {{filename: target/wasm32-wasip1/release/switchboard.wasm}}}}
                  environment_variables: {{host_env_keys: [KEY]}}
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: {value}"#
    )
}

const ROUTES: &str = r#"          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: /, headers: [{name: x-switchboard-cluster, present_match: true}]}
                route: {cluster_header: x-switchboard-cluster, timeout: 0s, idle_timeout: 300s}
              - match: {prefix: /}
                route: {cluster: plain, timeout: 300s}"#;

/// Runs `envoy-config` on a plugin config and a bootstrap: (success, stdout, stderr).
fn envoy_config(name: &str, plugin: &str, bootstrap: &str) -> (bool, String, String) {
    let p = temp(&format!("{name}-plugin.json"), plugin);
    let b = temp(&format!("{name}-bootstrap.yaml"), bootstrap);
    let out = run(&["envoy-config", p.to_str().unwrap(), b.to_str().unwrap()]);
    std::fs::remove_file(p).unwrap();
    std::fs::remove_file(b).unwrap();
    out
}

fn hcm(b: &Value) -> &Value {
    &b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
}

fn cluster<'a>(b: &'a Value, name: &str) -> &'a Value {
    let clusters = b["static_resources"]["clusters"].as_array().unwrap();
    clusters
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or(&Value::Null)
}

#[test]
fn copies_each_router_target_cluster_with_the_upstream_pass_in_the_same_vm() {
    let config = plugin(ROUTER);
    let (ok, out, err) = envoy_config(
        "clusters",
        &config,
        &bootstrap(&wasm_filter(&config), ROUTES),
    );
    assert!(ok, "{err}");
    let b: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = b["static_resources"]["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // `plain` is named only by a call-out virtual model.
    assert_eq!(
        names,
        ["tls", "legacy", "plain", "tls--router", "legacy--router"]
    );
    let main = &hcm(&b)["http_filters"][0]["typed_config"]["config"];
    let options = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
    for name in ["tls--router", "legacy--router"] {
        let c = cluster(&b, name);
        assert_eq!(c["load_assignment"]["cluster_name"], name);
        let filters = &c["typed_extension_protocol_options"][options]["http_filters"];
        let pass = &filters[0]["typed_config"]["config"];
        assert_eq!(filters[0]["name"], "switchboard_upstream");
        assert_eq!(pass["root_id"], UPSTREAM_ROOT_ID);
        // One VM per worker for both passes: they share the request's plan in its memory.
        assert_eq!(pass["vm_config"], main["vm_config"]);
        assert_eq!(pass["configuration"], main["configuration"]);
        assert_eq!(pass["failure_policy"], "FAIL_OPEN");
        assert_eq!(pass["allow_on_headers_stop_iteration"], true);
        assert_eq!(filters[1]["name"], "envoy.filters.http.upstream_codec");
        assert_eq!(filters.as_array().unwrap().len(), 2);
    }
    // The TLS cluster keeps its protocol choice and its transport socket.
    let tls = cluster(&b, "tls--router");
    assert_eq!(
        tls["typed_extension_protocol_options"][options]["auto_config"],
        json!({"http2_protocol_options": {}})
    );
    assert_eq!(
        tls["transport_socket"],
        cluster(&b, "tls")["transport_socket"]
    );
    assert!(tls["typed_extension_protocol_options"][options]
        .get("explicit_http_config")
        .is_none());
    // A deprecated cluster-level protocol field moves into HttpProtocolOptions (Envoy refuses both).
    let legacy = cluster(&b, "legacy--router");
    assert!(legacy.get("http2_protocol_options").is_none());
    assert_eq!(
        legacy["typed_extension_protocol_options"][options]["explicit_http_config"],
        json!({"http2_protocol_options": {"max_concurrent_streams": 10}})
    );
    // The originals are untouched.
    assert!(
        cluster(&b, "tls")["typed_extension_protocol_options"][options]
            .get("http_filters")
            .is_none()
    );
}

#[test]
fn adds_the_groups_and_reroute_filters_after_switchboard_and_the_route_first() {
    let config = plugin(ROUTER);
    let (ok, out, err) = envoy_config(
        "filters",
        &config,
        &bootstrap(&wasm_filter(&config), ROUTES),
    );
    assert!(ok, "{err}");
    let b: Value = serde_json::from_str(&out).unwrap();
    let filters = hcm(&b)["http_filters"].as_array().unwrap();
    let names: Vec<&str> = filters
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "switchboard",
            "switchboard_groups",
            "switchboard_reroute",
            "envoy.filters.http.router"
        ]
    );
    let rule = &filters[1]["typed_config"]["request_rules"][0];
    assert_eq!(rule["header"], GROUPS_HEADER);
    assert_eq!(rule["remove"], true);
    assert_eq!(
        rule["on_header_present"],
        json!({"metadata_namespace": GROUPS_NAMESPACE,
        "key": GROUPS_KEY, "type": "PROTOBUF_VALUE", "encode": "BASE64"})
    );
    // The reroute pass runs only on the router path: skipped unless the route header says so.
    let wrapped = &filters[2]["typed_config"];
    assert_eq!(
        wrapped["@type"],
        "type.googleapis.com/envoy.extensions.common.matching.v3.ExtensionWithMatcher"
    );
    let matcher = &wrapped["xds_matcher"]["matcher_list"]["matchers"][0];
    let predicate = &matcher["predicate"]["not_matcher"]["single_predicate"];
    assert_eq!(
        predicate["input"]["typed_config"]["header_name"],
        ROUTE_HEADER
    );
    assert_eq!(predicate["value_match"]["exact"], ROUTE_VALUE);
    assert!(matcher["on_match"]["action"]["typed_config"]["@type"]
        .as_str()
        .unwrap()
        .ends_with(".SkipFilter"));
    let reroute = &wrapped["extension_config"]["typed_config"]["config"];
    assert_eq!(reroute["root_id"], REROUTE_ROOT_ID);
    assert_eq!(
        reroute["vm_config"],
        filters[0]["typed_config"]["config"]["vm_config"]
    );

    let vhost = &hcm(&b)["route_config"]["virtual_hosts"][0];
    assert_eq!(vhost["include_request_attempt_count"], true);
    let routes = vhost["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 3);
    let r = &routes[0];
    assert_eq!(
        r["match"],
        json!({"prefix": "/", "headers": [{"name": ROUTE_HEADER, "string_match": {"exact": ROUTE_VALUE}}]})
    );
    assert_eq!(
        r["request_headers_to_remove"],
        json!([ROUTE_HEADER, "x-switchboard-cluster"])
    );
    assert_eq!(r["request_body_buffer_limit"], 1048576);
    // The cluster_header route's timeouts: the router path stands in for it.
    assert_eq!(r["route"]["timeout"], "0s");
    assert_eq!(r["route"]["idle_timeout"], "300s");
    let specifier = &r["route"]["inline_cluster_specifier_plugin"]["extension"]["typed_config"];
    assert_eq!(specifier["override_metadata_namespace"], GROUPS_NAMESPACE);
    assert_eq!(
        specifier["priority_groups"][0]["clusters"],
        json!([{"cluster_name": "tls--router", "weight": 1}])
    );
    assert_eq!(
        r["route"]["retry_policy"],
        json!({"retry_on": "", "num_retries": 0,
        "refresh_cluster_on_retry": true,
        "retry_back_off": {"base_interval": "0.025s", "max_interval": "0.25s"}})
    );
    assert_eq!(
        routes[1]["route"]["cluster_header"],
        "x-switchboard-cluster"
    );
}

#[test]
fn without_a_router_virtual_model_the_bootstrap_comes_back_unchanged() {
    let config = plugin("");
    let text = bootstrap(&wasm_filter(&config), ROUTES);
    let (ok, out, err) = envoy_config("unchanged", &config, &text);
    assert!(ok, "{err}");
    let given: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), given);
}

#[test]
fn refuses_what_it_cannot_complete_and_says_why() {
    let config = plugin(ROUTER);
    let routes = ROUTES;
    // A target's cluster that the bootstrap lacks.
    let missing = bootstrap(&wasm_filter(&config), routes).replace("name: legacy", "name: other");
    let (ok, out, err) = envoy_config("missing", &config, &missing);
    assert!(!ok && out.is_empty());
    assert!(err.contains("no cluster named `legacy`"), "{err}");
    // The native module.
    let native = r#"          - name: switchboard
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
              dynamic_module_config: {name: switchboard}
              filter_name: switchboard"#;
    let (ok, _, err) = envoy_config("native", &config, &bootstrap(native, routes));
    assert!(!ok);
    assert!(
        err.contains("native module") && err.contains("needs no router path"),
        "{err}"
    );
    // RDS: the route is printed for the operator to add.
    let rds = "          rds: {route_config_name: local, config_source: {ads: {}}}";
    let (ok, out, err) = envoy_config("rds", &config, &bootstrap(&wasm_filter(&config), rds));
    assert!(!ok && out.is_empty());
    assert!(
        err.contains("add this route by hand") && err.contains("priority_group"),
        "{err}"
    );
    assert!(
        err.contains(&format!("\"exact\": \"{ROUTE_VALUE}\"")),
        "{err}"
    );
    // Twice over.
    let (ok, once, _) = envoy_config("once", &config, &bootstrap(&wasm_filter(&config), routes));
    assert!(ok);
    let (ok, _, err) = envoy_config("twice", &config, &once);
    assert!(!ok && err.contains("there already"), "{err}");
}

#[test]
fn warns_when_the_filter_runs_another_configuration() {
    let config = plugin(ROUTER);
    let (ok, _, err) = envoy_config(
        "differs",
        &config,
        &bootstrap(&wasm_filter(&plugin("")), ROUTES),
    );
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: the Switchboard filter's configuration is not"),
        "{err}"
    );
    let (ok, _, err) = envoy_config("same", &config, &bootstrap(&wasm_filter(&config), ROUTES));
    assert!(ok && !err.contains("warning"), "{err}");
}
