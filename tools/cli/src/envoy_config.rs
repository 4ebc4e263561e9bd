//! `switchboard envoy-config PLUGIN_CONFIG BOOTSTRAP`: the Envoy config the router path
//! (`stream_fallbacks: "router"`, [`switchboard::core::router_path`]) needs, added to a
//! bootstrap: a copy of each target's cluster running the `.wasm`'s upstream pass, the
//! `header_to_metadata` and reroute filters after the Switchboard filter, and a first route
//! whose priority-group cluster specifier reads the attempts' clusters from dynamic metadata.
//!
//! Everything here is a plain edit of the bootstrap as JSON; Envoy 1.40's `--mode validate`
//! is the judge of the result (tests/e2e/test_envoy_configs.py runs it).

use serde_json::{json, Map, Value};
use switchboard::core::config::{Config, StreamFallbacks};
use switchboard::core::router_path::{
    router_cluster, GROUPS_HEADER, GROUPS_KEY, GROUPS_NAMESPACE, REROUTE_ROOT_ID, ROUTE_HEADER,
    ROUTE_VALUE, UPSTREAM_ROOT_ID,
};

const WASM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
const NATIVE_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter";
const HCM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
/// The key of `typed_extension_protocol_options` that holds a cluster's upstream HTTP filters.
const HTTP_OPTIONS: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
/// The Switchboard filter's root id in every shipped config.
const ROOT_ID: &str = "switchboard";
/// The names of the filters added after the Switchboard filter.
const GROUPS_FILTER: &str = "switchboard_groups";
const REROUTE_FILTER: &str = "switchboard_reroute";
const UPSTREAM_FILTER: &str = "switchboard_upstream";

/// The command: the bootstrap with the router path added, as pretty JSON.
pub fn run(args: &[String]) -> Result<String, String> {
    let [plugin_path, bootstrap_path] = args else {
        return Err(crate::USAGE.to_string());
    };
    let config = crate::load(plugin_path)?;
    let bootstrap = crate::import::load(bootstrap_path)?;
    if let Some(note) = configuration_differs(plugin_path, &bootstrap) {
        eprintln!("{bootstrap_path}: warning: {note}");
    }
    let out = add_router_path(&config, bootstrap).map_err(|e| format!("{bootstrap_path}: {e}"))?;
    serde_json::to_string_pretty(&out).map_err(|e| e.to_string())
}

/// `bootstrap` with what the router path needs; unchanged when no virtual model of `config`
/// takes it.
pub fn add_router_path(config: &Config, mut bootstrap: Value) -> Result<Value, String> {
    let clusters = target_clusters(config);
    let Some(first) = clusters.first() else {
        return Ok(bootstrap);
    };
    let plugin = switchboard_plugin(&mut bootstrap)?;
    let copies = router_clusters(&bootstrap, &clusters, &plugin)?;
    let route = router_route(config, first);
    for hcm in hcms(&mut bootstrap) {
        if let Some(at) = switchboard_index(hcm) {
            add_filters(hcm, at, &plugin);
            add_route(hcm, &route)?;
        }
    }
    let list = bootstrap
        .pointer_mut("/static_resources/clusters")
        .and_then(Value::as_array_mut)
        .ok_or("static_resources.clusters is not a list")?;
    list.extend(copies);
    Ok(bootstrap)
}

/// The clusters the targets of router-path virtual models name, each once, in config order.
fn target_clusters(config: &Config) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let router = config
        .virtual_models
        .iter()
        .filter(|vm| vm.streams.fallbacks == StreamFallbacks::Router);
    for t in router.flat_map(|vm| &vm.targets) {
        if let Some(m) = config.model(t.model) {
            if !out.contains(&m.cluster) {
                out.push(m.cluster.clone());
            }
        }
    }
    out
}

/// Every HTTP connection manager (its `typed_config`) of the static listeners.
fn hcms(bootstrap: &mut Value) -> Vec<&mut Map<String, Value>> {
    let listeners = bootstrap
        .pointer_mut("/static_resources/listeners")
        .and_then(Value::as_array_mut);
    let chains = listeners
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
        .flat_map(|l| l.iter_mut())
        .flat_map(|(key, v)| match key.as_str() {
            "filter_chains" => v.as_array_mut().map(|a| a.iter_mut().collect()),
            "default_filter_chain" => Some(vec![v]),
            _ => None,
        })
        .flatten();
    chains
        .filter_map(|c| c.get_mut("filters").and_then(Value::as_array_mut))
        .flatten()
        .filter_map(|f| f.get_mut("typed_config").and_then(Value::as_object_mut))
        .filter(|t| t.get("@type").and_then(Value::as_str) == Some(HCM_TYPE))
        .collect()
}

/// The HTTP filters of an HCM (none if it has no list).
fn http_filters(hcm: &Map<String, Value>) -> &[Value] {
    hcm.get("http_filters")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The Wasm plugin config (`typed_config.config`) of an HTTP filter that runs Switchboard's
/// `.wasm`: root id `switchboard`, or no root id and code ending in `switchboard.wasm`.
fn switchboard_wasm(filter: &Value) -> Option<&Value> {
    let typed = filter.get("typed_config")?;
    if typed.get("@type")?.as_str()? != WASM_TYPE {
        return None;
    }
    let plugin = typed.get("config")?;
    let is_ours = match plugin.get("root_id").and_then(Value::as_str) {
        Some(id) => id == ROOT_ID,
        None => {
            let code = plugin.pointer("/vm_config/code");
            let file = code.and_then(|c| c.pointer("/local/filename"));
            let uri = code.and_then(|c| c.pointer("/remote/http_uri/uri"));
            file.or(uri)
                .and_then(Value::as_str)
                .is_some_and(|f| f.ends_with("switchboard.wasm"))
        }
    };
    is_ours.then_some(plugin)
}

/// Where the Switchboard filter sits in an HCM's `http_filters`.
fn switchboard_index(hcm: &Map<String, Value>) -> Option<usize> {
    http_filters(hcm)
        .iter()
        .position(|f| switchboard_wasm(f).is_some())
}

/// The Switchboard filter's Wasm plugin config, the same in every HCM that has one (the
/// upstream pass can share only one filter's VM).
fn switchboard_plugin(bootstrap: &mut Value) -> Result<Value, String> {
    let mut found: Option<Value> = None;
    let mut native = false;
    let mut discovered = false;
    for hcm in hcms(bootstrap) {
        if http_filters(hcm)
            .iter()
            .any(|f| f.get("name") == Some(&json!(REROUTE_FILTER)))
        {
            return Err(
                "the router path is there already (a switchboard_reroute filter): \
                        give envoy-config the bootstrap without it"
                    .to_string(),
            );
        }
        for f in http_filters(hcm) {
            native |= f.pointer("/typed_config/@type") == Some(&json!(NATIVE_TYPE));
            discovered |= f.get("config_discovery").is_some();
            match (switchboard_wasm(f), &found) {
                (Some(p), Some(seen)) if p != seen => {
                    return Err(
                        "the Switchboard filters of the listeners differ (vm_config or \
                                configuration); the router clusters' upstream pass can share \
                                the VM of only one"
                            .to_string(),
                    )
                }
                (Some(p), _) => found = Some(p.clone()),
                (None, _) => {}
            }
        }
    }
    found.ok_or_else(|| no_filter_message(native, discovered))
}

/// Why there is nothing to add the router path to.
fn no_filter_message(native: bool, discovered: bool) -> String {
    let mut m = format!(
        "no Switchboard Wasm filter (root_id \"{ROOT_ID}\") in the http_filters of \
         static_resources.listeners"
    );
    if native {
        m.push_str(
            "; it runs Switchboard's native module, which streams every attempt itself and \
             needs no router path (stream_fallbacks: \"router\" changes nothing there)",
        );
    }
    if discovered {
        m.push_str(
            "; a filter configured through ECDS (config_discovery) cannot be read here: the \
             router path's passes need the filter's vm_config and configuration inline",
        );
    }
    m
}

/// A Wasm filter running another pass (`root_id`) of the Switchboard filter's `.wasm` in the
/// same VM: same `vm_config` (the VM is keyed by it, and the passes find a request's plan in
/// that VM's memory), same plugin configuration and failure policy.
fn pass_filter(plugin: &Value, name: &str, root_id: &str, hold_headers: bool) -> Value {
    let mut config = json!({"name": name, "root_id": root_id});
    for key in ["vm_config", "configuration", "failure_policy"] {
        if let Some(v) = plugin.get(key) {
            config[key] = v.clone();
        }
    }
    if hold_headers {
        // Without it a pause in the headers callback also stops the body callbacks
        // (research/router-path/README.md).
        config["allow_on_headers_stop_iteration"] = json!(true);
    }
    json!({"name": name, "typed_config": {"@type": WASM_TYPE, "config": config}})
}

/// The router-path copies of `names` (bootstrap clusters), in that order.
fn router_clusters(
    bootstrap: &Value,
    names: &[String],
    plugin: &Value,
) -> Result<Vec<Value>, String> {
    let existing = bootstrap
        .pointer("/static_resources/clusters")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let named = |n: &str| existing.iter().find(|c| c.get("name") == Some(&json!(n)));
    let upstream = pass_filter(plugin, UPSTREAM_FILTER, UPSTREAM_ROOT_ID, true);
    names
        .iter()
        .map(|name| {
            if named(&router_cluster(name)).is_some() {
                return Err(format!(
                    "cluster {} is there already: give envoy-config the bootstrap without \
                     the router path",
                    router_cluster(name)
                ));
            }
            let cluster = named(name).ok_or(format!(
                "no cluster named `{name}` in static_resources.clusters (a target of a \
                 virtual model with stream_fallbacks \"router\" names it)"
            ))?;
            router_copy(cluster, name, &upstream)
        })
        .collect()
}

/// One router-path cluster: `cluster` renamed, with the upstream pass first among its
/// upstream HTTP filters. Everything else (endpoints, TLS, timeouts) stays as it is.
fn router_copy(cluster: &Value, name: &str, upstream: &Value) -> Result<Value, String> {
    let mut copy = cluster
        .as_object()
        .cloned()
        .ok_or("a cluster is not an object")?;
    copy.insert("name".into(), json!(router_cluster(name)));
    if let Some(la) = copy
        .get_mut("load_assignment")
        .and_then(Value::as_object_mut)
    {
        la.insert("cluster_name".into(), json!(router_cluster(name)));
    }
    // An EDS cluster without a service name asks for its own name: the copy keeps asking for
    // the original's endpoints.
    let eds = copy.get("type") == Some(&json!("EDS")) || copy.contains_key("eds_cluster_config");
    if eds {
        let e = copy
            .entry("eds_cluster_config")
            .or_insert_with(|| json!({}));
        if e.get("service_name").is_none() {
            e["service_name"] = json!(name);
        }
    }
    let mut options = http_options(&mut copy);
    let filters = match options.remove("http_filters") {
        Some(Value::Array(mut fs)) if !fs.is_empty() => {
            fs.insert(0, upstream.clone());
            fs
        }
        _ => vec![
            upstream.clone(),
            json!({"name": "envoy.filters.http.upstream_codec", "typed_config":
                {"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}),
        ],
    };
    options.insert("http_filters".into(), Value::Array(filters));
    let protocol_options = copy
        .entry("typed_extension_protocol_options")
        .or_insert_with(|| json!({}));
    protocol_options[HTTP_OPTIONS] = Value::Object(options);
    Ok(Value::Object(copy))
}

/// The cluster's `HttpProtocolOptions` (removed from it, to be put back): its own, else one
/// made from the deprecated cluster-level protocol fields (Envoy refuses both at once), else
/// HTTP/1.1 as Envoy's default is (the proto requires a protocol choice).
fn http_options(cluster: &mut Map<String, Value>) -> Map<String, Value> {
    let own = cluster
        .get_mut("typed_extension_protocol_options")
        .and_then(Value::as_object_mut)
        .and_then(|o| o.remove(HTTP_OPTIONS))
        .and_then(|v| v.as_object().cloned());
    if let Some(own) = own {
        return own;
    }
    let mut o = Map::new();
    o.insert(
        "@type".into(),
        json!("type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"),
    );
    for key in [
        "common_http_protocol_options",
        "upstream_http_protocol_options",
    ] {
        if let Some(v) = cluster.remove(key) {
            o.insert(key.into(), v);
        }
    }
    let h1 = cluster.remove("http_protocol_options");
    let h2 = cluster.remove("http2_protocol_options");
    let downstream = cluster.remove("protocol_selection") == Some(json!("USE_DOWNSTREAM_PROTOCOL"));
    let protocol = match (downstream, h1, h2) {
        (true, h1, h2) => json!({"use_downstream_protocol_config": {
            "http_protocol_options": h1.unwrap_or(json!({})),
            "http2_protocol_options": h2.unwrap_or(json!({}))}}),
        (false, _, Some(h2)) => json!({"explicit_http_config": {"http2_protocol_options": h2}}),
        (false, h1, None) => {
            json!({"explicit_http_config": {"http_protocol_options": h1.unwrap_or(json!({}))}})
        }
    };
    if let Value::Object(p) = protocol {
        o.extend(p);
    }
    o
}

/// `header_to_metadata` (the attempts' groups, base64 `google.protobuf.Value`, into the
/// metadata the cluster specifier reads) and the reroute pass, after the Switchboard filter.
fn add_filters(hcm: &mut Map<String, Value>, at: usize, plugin: &Value) {
    let groups = json!({"name": GROUPS_FILTER, "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
        "request_rules": [{"header": GROUPS_HEADER, "remove": true, "on_header_present": {
            "metadata_namespace": GROUPS_NAMESPACE, "key": GROUPS_KEY,
            "type": "PROTOBUF_VALUE", "encode": "BASE64"}}]}});
    let reroute = only_on_router_path(pass_filter(plugin, REROUTE_FILTER, REROUTE_ROOT_ID, false));
    if let Some(fs) = hcm.get_mut("http_filters").and_then(Value::as_array_mut) {
        let at = (at + 1).min(fs.len());
        fs.splice(at..at, [groups, reroute]);
    }
}

/// `filter` wrapped so that Envoy skips it unless the request takes the router path (its
/// [`ROUTE_HEADER`] says so when the filter's turn comes): other requests pay no third pass.
/// Envoy docs, "Matching API", filter integration: an `ExtensionWithMatcher` whose
/// `SkipFilter` action matches when the header is absent or another value.
fn only_on_router_path(filter: Value) -> Value {
    let header = json!({"name": "request-headers", "typed_config": {
        "@type": "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput",
        "header_name": ROUTE_HEADER}});
    let skip = json!({"name": "skip", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.common.matcher.action.v3.SkipFilter"}});
    json!({"name": filter["name"], "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.common.matching.v3.ExtensionWithMatcher",
        "xds_matcher": {"matcher_list": {"matchers": [{
            "predicate": {"not_matcher": {"single_predicate": {
                "input": header, "value_match": {"exact": ROUTE_VALUE}}}},
            "on_match": {"action": skip}}]}},
        "extension_config": filter}})
}

/// The router-path route, without the `timeout` each virtual host gives it: matched by
/// [`ROUTE_HEADER`], the cluster per attempt from the groups in the request's metadata
/// (replacing the static one), and the retry policy set per request by the filter's
/// `x-envoy-*` headers (so none here; the back-off only spaces the attempts).
fn router_route(config: &Config, first_cluster: &str) -> Value {
    let first = router_cluster(first_cluster);
    json!({
        "match": {"prefix": "/", "headers": [
            {"name": ROUTE_HEADER, "string_match": {"exact": ROUTE_VALUE}}]},
        // The cluster header names the first attempt's cluster for a route without the router
        // path; here the specifier picks it, and no provider sees the header.
        "request_headers_to_remove": [ROUTE_HEADER, config.header_names.cluster],
        // Each attempt replays the body from this buffer.
        "request_body_buffer_limit": config.max_request_body_bytes,
        "route": {
            "inline_cluster_specifier_plugin": {"extension": {
                "name": "envoy.router.cluster_specifier_plugin.priority_group",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.router.cluster_specifiers.priority_group.v3.PriorityGroupClusterSpecifier",
                    "override_metadata_namespace": GROUPS_NAMESPACE,
                    "priority_groups": [{"name": first, "clusters": [
                        {"cluster_name": first, "weight": 1}]}]}}},
            "retry_policy": {"retry_on": "", "num_retries": 0, "refresh_cluster_on_retry": true,
                "retry_back_off": {"base_interval": "0.025s", "max_interval": "0.25s"}}
        }
    })
}

/// Puts `route` first in every virtual host of the HCM's inline route config, with the
/// `timeout` (and `idle_timeout`) of the host's `cluster_header` route, which the router path
/// stands in for; "0s" without one, since a stream must not be cut. RDS routes are not here
/// to change: the error shows the route to add by hand.
fn add_route(hcm: &mut Map<String, Value>, route: &Value) -> Result<(), String> {
    let Some(vhosts) = hcm
        .get_mut("route_config")
        .and_then(|r| r.get_mut("virtual_hosts"))
        .and_then(Value::as_array_mut)
    else {
        let mut r = route.clone();
        r["route"]["timeout"] = json!("0s");
        let text = serde_json::to_string_pretty(&r).unwrap_or_default();
        return Err(format!(
            "the HTTP connection manager with the Switchboard filter has no inline \
             route_config (RDS?): add this route by hand, first in each virtual host, and set \
             the virtual host's include_request_attempt_count: true\n{text}"
        ));
    };
    for vhost in vhosts.iter_mut().filter_map(Value::as_object_mut) {
        let mut r = route.clone();
        let own = vhost
            .get("routes")
            .and_then(Value::as_array)
            .and_then(|rs| {
                rs.iter()
                    .find_map(|r| r.get("route").filter(|a| a.get("cluster_header").is_some()))
            });
        r["route"]["timeout"] = own
            .and_then(|a| a.get("timeout"))
            .cloned()
            .unwrap_or(json!("0s"));
        if let Some(idle) = own.and_then(|a| a.get("idle_timeout")) {
            r["route"]["idle_timeout"] = idle.clone();
        }
        // Without it the router sends no x-envoy-attempt-count, which the upstream pass reads.
        vhost.insert("include_request_attempt_count".into(), json!(true));
        match vhost.get_mut("routes").and_then(Value::as_array_mut) {
            Some(routes) => routes.insert(0, r),
            None => {
                vhost.insert("routes".into(), json!([r]));
            }
        }
    }
    Ok(())
}

/// A note when the Switchboard filter's configuration in the bootstrap is not the plugin
/// config file: the passes get the filter's, so the file's router virtual models may not be
/// the ones Envoy runs.
fn configuration_differs(plugin_path: &str, bootstrap: &Value) -> Option<String> {
    let file: Value = serde_json::from_slice(&std::fs::read(plugin_path).ok()?).ok()?;
    let mut b = bootstrap.clone();
    let plugin = switchboard_plugin(&mut b).ok()?;
    let text = plugin.pointer("/configuration/value")?.as_str()?;
    let inline: Value = serde_json::from_str(text).ok()?;
    (inline != file).then(|| {
        format!(
            "the Switchboard filter's configuration is not {plugin_path}: the router path's \
             passes run the filter's, and its virtual models decide which requests take it"
        )
    })
}
