//! The compiled plugin config: the catalog, the virtual models and the name table the request
//! path looks names up in. [`Config::parse`] (in `compile.rs`) builds it.

use super::catalog::{Model, ModelId};
use super::settings::{AccountHeaders, CallerIdentity, HeaderNames, NonNativeResponses};
use super::trace_settings::TraceSettings;
use super::virtual_model::VirtualModel;
use crate::core::health::policy::FailureWindow;
use hashbrown::HashMap;

/// Default limit for a buffered request body: 16 MiB holds long-context prompts with images.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: usize = 16 * 1024 * 1024;

/// What a model name in a request refers to.
#[derive(Debug, Clone, Copy)]
pub enum Named<'a> {
    /// A catalog model.
    Catalog(ModelId, &'a Model),
    /// A virtual model, with its index in [`Config::virtual_models`].
    Virtual(usize, &'a VirtualModel),
}

/// What a key of the name table points at.
#[derive(Debug, Clone, Copy)]
pub(super) enum NameEntry {
    Catalog(ModelId),
    Virtual(usize),
}

/// The compiled plugin config.
#[derive(Debug, Clone)]
pub struct Config {
    /// The catalog, indexed by [`ModelId`].
    pub models: Vec<Model>,
    /// The virtual models.
    pub virtual_models: Vec<VirtualModel>,
    /// Largest request body buffered for inspection; larger ones get a 413.
    pub max_request_body_bytes: usize,
    /// Header names.
    pub header_names: HeaderNames,
    /// The rolling failure window that marks targets unhealthy.
    pub failure_window: FailureWindow,
    /// How long a worker may use its cached view of shared health before re-reading it.
    pub health_view_ms: u64,
    /// Longest time a fallback or retry attempt made by the filter may take.
    pub attempt_timeout_ms: u64,
    /// The answer to `GET /v1/models`: public catalog models and virtual models, OpenAI's list
    /// shape, serialised once at load.
    pub models_list_json: String,
    /// Whether any virtual model asks a classifier model (so requests may need a second look).
    pub has_classifier: bool,
    /// `default_metadata`: merged into every request's metadata, winning on shared keys.
    pub default_metadata: Vec<(String, String)>,
    /// `response_id_keys`: what Switchboard's response ids are minted and verified with.
    pub response_keys: crate::core::seal::Keys,
    /// `response_id_binding: "caller"`: minted ids and marks carry the caller's identity
    /// digest, and only that caller may use them (default: any caller holding the id).
    pub bind_ids_to_caller: bool,
    /// `caller_identity`: who is calling.
    pub caller_identity: CallerIdentity,
    /// `account_headers`: what a target with the gateway's credential drops either way.
    pub account_headers: AccountHeaders,
    /// What the operator should know about this config, each logged once when it loads and
    /// printed by `switchboard check`: it loads, but does something unsafe or surprising (an
    /// adapter adds its own, e.g. [`Config::env_warning`]).
    pub warnings: Vec<String>,
    /// `stored_responses_virtual_model`: the virtual model that routes a retrieve or delete
    /// naming a raw provider id (which names no model).
    pub stored_responses_virtual_model: Option<usize>,
    /// `non_native_responses`: what a `/v1/responses` request does with a target that does not
    /// serve the Responses API natively.
    pub non_native_responses: NonNativeResponses,
    /// `gateway_region` and `gateway_zone`: the config's `gateway_location`, under the host's
    /// locality where the adapter reads one; metadata over the header and `default_metadata`.
    pub gateway_metadata: Vec<(String, String)>,
    /// `model_name_case: "insensitive"`: model names are looked up without regard to ASCII case.
    pub fold_case: bool,
    /// `trace`: when answers carry the routing trace header.
    pub trace: TraceSettings,
    /// `filter_state` (default false): each routed request writes its routing facts as Envoy
    /// filter state (`wasm.switchboard.*`) for the access log: five host calls a request, so
    /// only when an access log prints them.
    pub filter_state: bool,
    /// `usage_metrics` (default false): every successful answer's body is read as it passes
    /// for the token, time-to-first-token and time-per-token metrics (answers of virtual
    /// models whose routing uses latency are read anyway).
    pub usage_metrics: bool,
    /// `request_histograms` (default false): each routed request records its attempts and its
    /// decision's own time in two histograms. Envoy spends ~3k instructions (about 1 µs) on
    /// each histogram value it takes, and timing the decision reads the clock once more, which
    /// is more than the plain request's budget has room for; the counters stay on.
    pub request_histograms: bool,
    /// The variables `${env:NAME}` read while the config lists no `env_keys` (sorted, once each).
    pub env_unlisted: Vec<String>,
    pub(super) names: HashMap<String, NameEntry>,
}

/// The key a model name is stored and looked up under: the name itself, or under `model_name_case:
/// "insensitive"` its ASCII lower case (Zuplo model load balancing, "Limitations": the policy
/// compares entries without regard to case).
pub(crate) fn name_key(name: &str, fold_case: bool) -> std::borrow::Cow<'_, str> {
    if fold_case && name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

impl Config {
    /// Whether a routed request's decision is timed: only the `decision_us` histogram and the
    /// access log's decision time show it, and timing it costs the `.wasm` a clock read.
    pub fn times_decisions(&self) -> bool {
        self.request_histograms || self.filter_state
    }

    /// Sets the gateway's location metadata from the host (TrueFoundry virtual models,
    /// "Metadata-based target filtering": location metadata added by the gateway):
    /// `gateway_region` and `gateway_zone`, each where the host names it, over the config's
    /// `gateway_location`.
    pub fn with_gateway_location(mut self, region: Option<String>, zone: Option<String>) -> Self {
        for (key, value) in [("gateway_region", region), ("gateway_zone", zone)] {
            let Some(value) = value.filter(|v| !v.is_empty()) else {
                continue;
            };
            match self.gateway_metadata.iter_mut().find(|(k, _)| k == key) {
                Some(pair) => pair.1 = value,
                None => self.gateway_metadata.push((key.to_string(), value)),
            }
        }
        self
    }

    /// The native module's warning when `${env:NAME}` read variables with no `env_keys` to
    /// limit them: the module reads Envoy's own environment, so a config may name any of
    /// Envoy's variables (the Wasm VM sees only those `host_env_keys` hands it).
    pub fn env_warning(&self) -> Option<String> {
        (!self.env_unlisted.is_empty()).then(|| {
            format!(
                "`${{env:NAME}}` reads {} with no `env_keys` list: in the native module it may \
                 read any of Envoy's environment variables; list the ones the config may read \
                 in `env_keys`",
                self.env_unlisted.join(", ")
            )
        })
    }

    /// Looks a model name up in the catalog and the virtual models.
    pub fn lookup(&self, name: &str) -> Option<Named<'_>> {
        match *self.names.get(name_key(name, self.fold_case).as_ref())? {
            NameEntry::Catalog(id) => self.models.get(id.0).map(|m| Named::Catalog(id, m)),
            NameEntry::Virtual(i) => self.virtual_models.get(i).map(|vm| Named::Virtual(i, vm)),
        }
    }

    /// The catalog model with this id.
    pub fn model(&self, id: ModelId) -> Option<&Model> {
        self.models.get(id.0)
    }
}
