//! One filter config as Envoy loaded it: the compiled plugin config shared by every stream
//! and worker, and the routing state decisions read.

use super::ffi::Api;
use super::host::Stream;
use super::store::{self, Shared};
use crate::core::config::{CallerIdentity, Config};
use crate::core::plugin::Plugin as CorePlugin;
use crate::core::routing::pins::{self, PinClock};
use crate::core::routing::round_robin::Cursors;
use crate::core::routing::{CursorKey, RoutingState};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ids of plugin configs, for each worker's cached views.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The filter config: made on Envoy's main thread, then read by every worker.
pub struct Plugin {
    /// Envoy's callbacks.
    pub api: &'static Api,
    /// The compiled plugin config, with its metrics' ids in Envoy.
    pub core: CorePlugin,
    /// This config's id (worker views are per config).
    pub id: u64,
}

impl Plugin {
    /// Parses the filter config: the same JSON plugin config the Wasm filter takes, with
    /// `${env:NAME}` resolved from Envoy's own environment (this library runs in its process:
    /// a warning when no `env_keys` limits it); `define` defines its metrics in Envoy.
    pub fn load(
        api: &'static Api,
        json: &[u8],
        define: impl FnOnce(CorePlugin) -> CorePlugin,
    ) -> Result<Plugin, String> {
        let env = |name: &str| std::env::var(name).ok();
        let mut config = Config::parse_with_env(json, &env).map_err(|e| e.to_string())?;
        config.warnings.extend(config.env_warning());
        let core = define(CorePlugin::new(without_jwt_caller(config)));
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        store::register(id);
        Ok(Plugin { api, core, id })
    }

    /// The compiled plugin config.
    pub fn config(&self) -> &Config {
        &self.core.config
    }
}

/// The ABI reads no claim of the verified JWT ([`Routing::verified_claim`]): a JWT
/// `caller_identity` falls back to the client's credential, with a warning at load.
fn without_jwt_caller(mut config: Config) -> Config {
    if config.caller_identity.reads_jwt() {
        config.warnings.push(
            "caller_identity reads a JWT claim, which the native build cannot read (Envoy \
             1.40's dynamic-modules ABI reads no claim inside jwt_authn's payload): callers are \
             told apart by their credential instead"
                .to_string(),
        );
        config.caller_identity = CallerIdentity::Credential;
    }
    config
}

impl Drop for Plugin {
    fn drop(&mut self) {
        store::forget(self.id);
    }
}

/// What a decision consults besides the request and health, for one stream.
pub struct Routing<'a> {
    pub plugin: &'a Plugin,
    pub stream: &'a Stream,
}

impl RoutingState for Routing<'_> {
    fn pinned(
        &self,
        virtual_model: &str,
        session: u64,
        window: u64,
        clock: PinClock,
    ) -> Option<String> {
        let key = (virtual_model, session, window);
        pins::lookup(&Shared, store::slot_secret(), key, clock)
    }

    /// Only the session's hash is stored, never its key; a pin that finds no room is dropped.
    fn pin(&self, virtual_model: &str, session: u64, window: u64, value: &str, clock: PinClock) {
        let key = (virtual_model, session, window);
        if !pins::save(&Shared, store::slot_secret(), key, value, clock) {
            log::debug!("no room to pin a sticky session of {virtual_model}");
        }
    }

    /// Envoy's `jwt_authn` filter stores the verified payload as a `Struct` under its
    /// `payload_in_metadata` key. The 1.40 ABI reads only top-level string values of a
    /// metadata namespace, not a claim inside that `Struct`: no claim is found (the core then
    /// treats the request as carrying none).
    fn verified_claim(&self, payload: &str, claim: &str) -> Option<Vec<u8>> {
        let _ = (payload, claim, self.stream);
        None
    }

    /// One cursor per caller per virtual model per worker thread, placed at random on first
    /// use ([`crate::core::routing::round_robin`]); a config's cursors are its own.
    fn next_cursor(&self, whose: CursorKey, len: usize, rng: &mut fastrand::Rng) -> usize {
        CURSORS.with(|c| {
            c.borrow_mut()
                .next((self.plugin.id, whose.0, whose.1), len, rng)
        })
    }
}

thread_local! {
    /// Each worker's round-robin cursors, for every config it serves.
    static CURSORS: RefCell<Cursors> = RefCell::new(Cursors::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwt_caller_identity_falls_back_to_the_credential_with_a_warning() {
        let json = br#"{"models": [{"name": "m", "cluster": "c", "model": "m"}],
            "caller_identity": {"source": "jwt", "claim": "sub"}}"#;
        let config = without_jwt_caller(Config::parse(json).unwrap());
        assert_eq!(config.caller_identity, CallerIdentity::Credential);
        assert!(config
            .warnings
            .iter()
            .any(|w| w.contains("caller_identity")));
        let json = br#"{"models": [{"name": "m", "cluster": "c", "model": "m"}],
            "caller_identity": {"source": "headers", "key": "x-tenant"}}"#;
        let config = without_jwt_caller(Config::parse(json).unwrap());
        assert!(matches!(
            config.caller_identity,
            CallerIdentity::Identifier(_)
        ));
        assert!(config.warnings.is_empty());
    }
}
