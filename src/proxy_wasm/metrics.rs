//! Switchboard's metrics in Envoy: every name defined once when a config loads, then written
//! by the host's id only (no name, no formatting, no allocation on the request path).
//!
//! The names and their order are the core's ([`crate::core::metrics`]); the ids live in the
//! config they were defined for, so a request still in flight after a reload writes to its
//! own config's series.

use super::host;
use crate::core::metrics::{self, Kind, UNDEFINED};
use crate::core::plugin::Plugin;
use crate::core::report::Write;
use crate::core::routing::HealthInput;
use proxy_wasm::types::MetricType;

/// Defines every metric of `plugin` and returns it with their ids; sets the config version
/// gauge to `version`.
pub fn define(plugin: Plugin, version: u64) -> Plugin {
    let ids = metrics::definitions(&plugin.config)
        .iter()
        .map(|(kind, name)| {
            let kind = match kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            host::define_metric(kind, name).unwrap_or(UNDEFINED)
        })
        .collect();
    let plugin = plugin.with_metric_ids(ids);
    if let Some(id) = plugin.metrics.config_version() {
        host::record_metric(id, version);
    }
    plugin
}

/// Performs a write the core decided ([`crate::core::report`]).
pub fn write(id: u32, w: Write) {
    match w {
        Write::Add(n) => host::add_to_counter(id, n),
        Write::Record(v) => host::record_metric(id, v),
    }
}

/// Sets the `health` gauges that changed since `last` (this worker's last written values,
/// by pair number; resized and reset with the config).
pub fn update_health(plugin: &Plugin, health: &HealthInput<'_>, last: &mut Vec<u8>) {
    metrics::changed_health_gauges(
        (&plugin.config, &plugin.metrics),
        health,
        last,
        host::record_metric,
    );
}
