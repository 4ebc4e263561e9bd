//! Switchboard's metrics through the dynamic-modules ABI: the same names and table as the
//! Wasm build ([`crate::core::metrics`]), defined when Envoy makes the filter config, then
//! written by id from the core's decisions ([`crate::core::report`]).
//!
//! Every metric is defined without labels: the virtual model and target are in its name, as
//! in the Wasm build, and a label-less id is written with no tag lookup per request. Envoy
//! 1.40 files a dynamic module's metric `N` as `dynamicmodulescustom.N` (the shipped
//! `stats_tags` rules accept that prefix as well as `wasmcustom.`).

use super::ffi::{Api, ConfigEnvoyPtr, ModuleBuffer};
use super::host::Stream;
use crate::core::metrics::{self, Kind, UNDEFINED};
use crate::core::plugin::Plugin;
use crate::core::routing::HealthInput;

/// `envoy_dynamic_module_type_metrics_result_Success`.
const SUCCESS: u32 = 0;

/// Defines every metric of `plugin` on Envoy's config object and returns it with their ids;
/// sets the config version gauge to `version`.
pub fn define(api: &Api, envoy: ConfigEnvoyPtr, plugin: Plugin, version: u64) -> Plugin {
    let ids = metrics::definitions(&plugin.config)
        .iter()
        .map(|(kind, name)| {
            let define = match kind {
                Kind::Counter => api.http_filter_config_define_counter,
                Kind::Gauge => api.http_filter_config_define_gauge,
                Kind::Histogram => api.http_filter_config_define_histogram,
            };
            let mut id = 0usize;
            let name = ModuleBuffer::of(name.as_bytes());
            // SAFETY: called in `on_http_filter_config_new` with Envoy's config object; the
            // name is read during the call; no labels.
            let result = unsafe { define(envoy, name, std::ptr::null_mut(), 0, &mut id) };
            match (result, u32::try_from(id)) {
                (SUCCESS, Ok(id)) if id != UNDEFINED => id,
                _ => UNDEFINED,
            }
        })
        .collect();
    let plugin = plugin.with_metric_ids(ids);
    if let Some(id) = plugin.metrics.config_version() {
        // SAFETY: as above; the id is one Envoy just gave.
        unsafe {
            (api.http_filter_config_set_gauge)(envoy, id as usize, std::ptr::null_mut(), 0, version)
        };
    }
    plugin
}

/// Sets the `health` gauges that changed since `last` (this worker's last written values,
/// by pair number), through `stream`.
pub fn update_health(s: &Stream, plugin: &Plugin, health: &HealthInput<'_>, last: &mut Vec<u8>) {
    metrics::changed_health_gauges(
        (&plugin.config, &plugin.metrics),
        health,
        last,
        |id, value| s.set_gauge(id, value),
    );
}
