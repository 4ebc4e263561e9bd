//! The root context: loads the plugin config once per (re)configuration, creates the
//! per-request contexts that share it, and runs the timers and calls of the worker's flights.

use super::host;
use super::http::Http;
use super::router_path::{Reroute, Upstream};
use super::runtime::Runtime;
use super::stream;
use crate::core::config::{Config, ConfigVersion};
use crate::core::plugin::Plugin;
use crate::core::router_path::{REROUTE_ROOT_ID, UPSTREAM_ROOT_ID};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;
use std::cell::Cell;
use std::rc::Rc;

/// Which pass of the `.wasm` a root context runs (its `root_id`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The Switchboard filter.
    Filter,
    /// The router path's pass per attempt, in an upstream filter chain.
    Upstream,
    /// The router path's route-cache clear after `header_to_metadata`.
    Reroute,
}

/// One per plugin per worker thread.
pub struct Root {
    role: Role,
    plugin: Option<Rc<Plugin>>,
    runtime: Rc<Runtime>,
    /// State of a splitmix64 sequence that seeds each request's RNG.
    seed: Cell<u64>,
}

impl Root {
    /// A root context with no config yet.
    pub fn new(context_id: u32) -> Self {
        Root {
            role: Role::Filter,
            plugin: None,
            runtime: Rc::new(Runtime::default()),
            // Every worker's root context starts in the same millisecond with the same id, so
            // without the host's entropy all workers would draw the same sequence of picks.
            seed: Cell::new(
                host::entropy().unwrap_or(0)
                    ^ host::now_ms().wrapping_mul(1_000_003)
                    ^ (u64::from(context_id) << 32),
            ),
        }
    }

    /// The next seed (splitmix64), so each request draws from its own stream.
    fn next_seed(&self) -> u64 {
        let s = self.seed.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.seed.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Context for Root {
    fn on_http_call_response(
        &mut self,
        token: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let _span = super::profile::span("on_http_call_response");
        stream::on_root_call_response(&self.runtime, token, num_headers, body_size);
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let _span = super::profile::span("on_configure");
        host::follow_host_log_level();
        // The router path's passes read the request's plan from the Switchboard filter in the
        // same VM, never a config of their own.
        self.role = match host::property(&["plugin_root_id"]).as_deref() {
            Some(UPSTREAM_ROOT_ID) => Role::Upstream,
            Some(REROUTE_ROOT_ID) => Role::Reroute,
            _ => Role::Filter,
        };
        if self.role != Role::Filter {
            return true;
        }
        // `${env:NAME}` in header values: the VM's environment, which Envoy fills from its own
        // with `vm_config.environment_variables.host_env_keys` (read once, here).
        let env = |name: &str| std::env::var(name).ok();
        let text = host::plugin_configuration();
        let version = ConfigVersion::of(&text);
        match Config::parse_with_env(&text, &env) {
            Ok(config) => {
                // Envoy's node locality, read once: metadata below the header and defaults.
                // Envoy 1.40 answers `xds.node` in on_configure (the `node` attribute is not
                // there yet).
                let locality = |key: &str| host::property(&["xds", "node", "locality", key]);
                let config = config.with_gateway_location(locality("region"), locality("zone"));
                log::info!(
                    "loaded config {version}: {} models and {} virtual models",
                    config.models.len(),
                    config.virtual_models.len()
                );
                for warning in &config.warnings {
                    log::warn!("config {version}: {warning}");
                }
                let plugin = super::metrics::define(Plugin::new(config), version.0);
                self.plugin = Some(Rc::new(plugin));
                self.runtime.reset_for_new_config();
                self.runtime.share_slot_secret();
                true
            }
            Err(e) => {
                // Returning false makes Envoy refuse the configuration. On an ECDS update,
                // Envoy 1.40 then rejects the update and the previous config keeps serving
                // (its VMs untouched), so there is nothing to keep here.
                log::error!("invalid plugin configuration: {e} (config {version} refused)");
                false
            }
        }
    }

    fn on_tick(&mut self) {
        let _span = super::profile::span("on_tick");
        let now = host::now_ms();
        for (context_id, token) in self.runtime.take_due(now) {
            if host::set_effective_context(context_id) {
                stream::on_timer(&self.runtime, context_id, token);
            }
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        let _span = super::profile::span("create_http_context");
        match self.role {
            Role::Filter => {}
            Role::Upstream => return Some(Box::<Upstream>::default()),
            Role::Reroute => return Some(Box::new(Reroute)),
        }
        let rng = fastrand::Rng::with_seed(self.next_seed());
        Some(Box::new(Http::new(
            context_id,
            self.plugin.clone(),
            Rc::clone(&self.runtime),
            rng,
        )))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
