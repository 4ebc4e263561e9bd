//! The plugin config, compiled: the catalog, the virtual models and lookup tables.
//!
//! The JSON contract is fixed by the foundation issue (`models[]`, `virtual_models[]` with
//! TrueFoundry's `routing_config` field names). [`Config::parse`] reads and validates it once;
//! the request path only looks names up in the compiled tables.
//!
//! The compiled form is plain data, one file per part (`catalog.rs`, `strategy.rs`,
//! `virtual_model.rs`, `settings.rs`, `trace_settings.rs`, `root.rs`); the other files read the
//! JSON into it.

mod answer_fallbacks;
mod callers;
mod catalog;
mod compile;
mod failure_rules;
mod fields;
mod header_rules;
mod identifiers;
mod metadata;
mod models;
mod responses;
mod root;
mod routing_config;
mod settings;
mod strategy;
mod stream_rules;
mod targets;
mod trace_settings;
mod translation;
mod upstream;
mod version;
mod virtual_model;

pub use answer_fallbacks::AnswerFallbacks;
pub use catalog::{is_credential, Model, ModelId, Provider, Visibility, CREDENTIAL_HEADERS};
pub use failure_rules::Budget;
pub use fields::ConfigError;
pub use root::{Config, Named, DEFAULT_MAX_REQUEST_BODY_BYTES};
pub use settings::{AccountHeaders, CallerIdentity, HeaderNames, NonNativeResponses};
pub use strategy::{
    Classifier, ComplexityTarget, ConditionalTarget, HashKey, PriorityTarget, Routing,
    SessionIdentifier, StickyRouting, StickySource, Thresholds, Tier, WeightedTarget,
    DEFAULT_JWT_PAYLOAD,
};
pub use stream_rules::{StreamFallbacks, StreamRules};
pub use trace_settings::TraceSettings;
pub use translation::Translation;
pub use upstream::Upstream;
pub use version::ConfigVersion;
pub use virtual_model::{
    AtLast, HeadersOverride, TargetConfig, TargetPolicy, TimeoutRules, TimeoutScope, VirtualModel,
    DIRECT_POLICY,
};
