//! The router path (`stream_fallbacks: "router"`, the `.wasm`'s streamed retries and
//! fallbacks): every attempt of a streaming request goes through Envoy's router, so a fallback's
//! answer streams to the client as it arrives. proxy-wasm's call-out hands back a whole answer;
//! the router is the only way for a `.wasm` attempt to stream.
//!
//! How Envoy 1.40 carries a per-request candidate order (each fact seen in a run):
//! - The Switchboard filter names the attempts' clusters in [`GROUPS_HEADER`]: a base64
//!   `google.protobuf.Value`, one priority group per attempt. `header_to_metadata` turns it into
//!   the dynamic metadata [`GROUPS_NAMESPACE`]`.`[`GROUPS_KEY`], which the route's
//!   priority-group cluster specifier reads; `refresh_cluster_on_retry` picks attempt n's group.
//! - `header_to_metadata` looks up its per-route config, which resolves the route before the
//!   metadata exists: a second pass of this `.wasm` ([`REROUTE_ROOT_ID`]) changes a header
//!   after it, and Envoy's Wasm filter then clears the route cache.
//! - The retry policy is per request: `x-envoy-max-retries`, `x-envoy-retry-on`,
//!   `x-envoy-retriable-status-codes` and `x-envoy-upstream-rq-per-try-timeout-ms`, set by a
//!   filter before the router (a client's own are ignored by Envoy at the edge).
//! - Each attempt's clusters are copies of the targets' clusters ([`router_cluster`]) that run
//!   this `.wasm` once more as an upstream HTTP filter ([`UPSTREAM_ROOT_ID`]): it rewrites the
//!   attempt for its target (authority, path, credentials, body) and holds a 2xx streamed answer
//!   until its first content event, turning a failure before it into a 503 the router retries.
//!   Only the copies run it, so no other request pays for it.
//! - The upstream filter shares the downstream filter's VM (same `vm_config`: one VM per worker
//!   thread), so both find the request's plan in that thread's memory by `x-request-id`.
//!
//! `switchboard envoy-config` writes this Envoy config from a plugin config and a bootstrap.

/// Set by the Switchboard filter on a request that takes the router path; the router-path
/// route matches it and removes it.
pub const ROUTE_HEADER: &str = "x-switchboard-route";
/// [`ROUTE_HEADER`]'s value.
pub const ROUTE_VALUE: &str = "router";
/// The attempts' priority groups (base64 `google.protobuf.Value`), read and removed by
/// `header_to_metadata`.
pub const GROUPS_HEADER: &str = "x-switchboard-groups";
/// The dynamic metadata namespace `header_to_metadata` writes and the cluster specifier's
/// `override_metadata_namespace` reads.
pub const GROUPS_NAMESPACE: &str = "switchboard.router";
/// The key under [`GROUPS_NAMESPACE`]: the priority-group specifier's own field name.
pub const GROUPS_KEY: &str = "priority_groups";
/// The root id of the upstream pass (one per attempt, in the router-path clusters).
pub const UPSTREAM_ROOT_ID: &str = "switchboard_upstream";
/// The root id of the pass after `header_to_metadata` that clears the route cache.
pub const REROUTE_ROOT_ID: &str = "switchboard_reroute";
/// What a router-path cluster's name adds to its target's cluster name.
pub const ROUTER_CLUSTER_SUFFIX: &str = "--router";

/// The router-path copy of `cluster`: the same endpoints, with the upstream pass.
pub fn router_cluster(cluster: &str) -> String {
    let mut name = String::with_capacity(cluster.len() + ROUTER_CLUSTER_SUFFIX.len());
    name.push_str(cluster);
    name.push_str(ROUTER_CLUSTER_SUFFIX);
    name
}

mod attempt;
mod groups;
mod plan;

pub use attempt::{AttemptRequest, AttemptWatch, BodyVerdict, RouterAnswer, RouterFlight};
pub use groups::groups_header;
pub use plan::{plan, RouterPlan};

#[cfg(test)]
mod tests;
