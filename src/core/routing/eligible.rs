//! Which targets of a virtual model a request may reach, and why each other one is out: the
//! one place for the checks routing makes around its strategy, and for the skip reasons the
//! trace header and `switchboard explain` print ([`super::Plan::skipped`]).
//!
//! Before the strategy orders the targets, a target must serve the endpoint natively
//! (TrueFoundry virtual models, "Supported API Types"), its `metadata_match` must hold
//! (TrueFoundry virtual models, "Metadata-based target filtering": filtering runs before load
//! balancing and stickiness), and a caller may narrow the list further (`within`: a Responses
//! request that must reach a provider that stores responses). Conditional routing's `when`
//! is the strategy's own filter. After it, the plan ends at a Responses target that does not
//! serve the API natively (`native.rs`) and at `max_targets_per_request` (Zuplo model load
//! balancing, "Failures and retries").

use super::native;
use super::request::Request;
use crate::core::config::{Config, ModelId, Routing, VirtualModel};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::translate;
use std::borrow::Cow;

/// Why a target of the virtual model is not among a request's candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Its `apis` do not serve the endpoint.
    Apis,
    /// Its `metadata_match` does not hold for the request's metadata.
    MetadataMatch,
    /// Its `when` condition is false.
    When,
    /// Cut by `max_targets_per_request`.
    MaxTargets,
    /// The request is pinned to one target (a conversation's origin, a stored response).
    Pinned,
    /// A Responses request that must be stored, and this target's provider stores nothing.
    StoresResponses,
    /// Behind a Responses target that does not serve the API natively, where the fallback
    /// chain ends (`non_native_responses: "reject"`).
    BehindNotNative,
}

impl Skip {
    /// The word the trace uses.
    pub fn name(self) -> &'static str {
        match self {
            Skip::Apis => "apis",
            Skip::MetadataMatch => "metadata_match",
            Skip::When => "when",
            Skip::MaxTargets => "max_targets_per_request",
            Skip::Pinned => "pinned",
            Skip::StoresResponses => "stores_responses",
            Skip::BehindNotNative => "behind_not_native",
        }
    }
}

/// A virtual model's own refusals: an endpoint outside its `model_types`, or no target that
/// serves the endpoint natively.
pub(super) fn check_virtual(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
) -> Result<(), ErrorReply> {
    let (model, path) = (request.model, request.endpoint.display_path());
    if !vm.model_types.contains(request.endpoint.model_type()) {
        return Err(ErrorReply::endpoint_not_served(model, path));
    }
    if !vm
        .targets
        .iter()
        .any(|t| serves(config, vm, request, t.model))
    {
        return Err(ErrorReply::no_capable_target(model, path));
    }
    Ok(())
}

/// Whether catalog model `m` serves the request's endpoint as a target of `vm`: natively, or
/// translated (`translate`).
fn serves(config: &Config, vm: &VirtualModel, request: &Request<'_>, m: ModelId) -> bool {
    config
        .model(m)
        .is_some_and(|model| translate::serves(Some(vm), request.endpoint, model))
}

/// Why a virtual model's filters left no candidate for the request naming it `model`.
pub(super) fn nothing_left(vm: &VirtualModel, model: &str) -> ErrorReply {
    match vm.routing {
        Routing::Conditional(_) => ErrorReply::no_condition_matched(model),
        _ if vm.has_metadata_match => ErrorReply::no_target_matched(model),
        _ => ErrorReply::no_target_available(model),
    }
}

/// The targets of `vm` that may take this request whatever the strategy, health and
/// `max_targets_per_request` make of it, in config order: they serve the endpoint (see
/// `Admit`), their `metadata_match` holds and, under conditional routing, their `when`
/// does. The same errors as [`super::plan()`] when there are none.
pub fn eligible(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
) -> Result<Vec<ModelId>, ErrorReply> {
    check_virtual(config, vm, request)?;
    let admit = Admit::new(config, vm, request, None);
    let out: Vec<ModelId> = vm
        .targets
        .iter()
        .map(|t| t.model)
        .filter(|m| admit.admits(*m) && when_holds(vm, request, *m))
        .collect();
    if out.is_empty() {
        return Err(nothing_left(vm, request.model));
    }
    Ok(out)
}

/// Whether target `m`'s `when` holds, under conditional routing (always, under the others).
fn when_holds(vm: &VirtualModel, request: &Request<'_>, m: ModelId) -> bool {
    match &vm.routing {
        Routing::Conditional(targets) => targets
            .iter()
            .any(|t| t.model == m && t.when.eval(request as &dyn crate::core::when::Facts)),
        _ => true,
    }
}

/// Which targets of a virtual model a request may reach before its strategy orders them.
pub(super) struct Admit<'r> {
    config: &'r Config,
    vm: &'r VirtualModel,
    request: &'r Request<'r>,
    within: Option<&'r dyn Fn(ModelId) -> bool>,
    /// Under `non_native_responses: "reject"`, a `/v1/responses` target that does not serve
    /// the Responses API natively stays in, so that routing picking it answers the 400.
    keeps_non_native: bool,
    /// Whether any target can fail a check: otherwise the target list is used as it is.
    filters: bool,
}

impl<'r> Admit<'r> {
    pub(super) fn new(
        config: &'r Config,
        vm: &'r VirtualModel,
        request: &'r Request<'r>,
        within: Option<&'r dyn Fn(ModelId) -> bool>,
    ) -> Self {
        let keeps_non_native =
            native::keeps_non_native(request.endpoint, config.non_native_responses);
        let mut admit = Admit {
            config,
            vm,
            request,
            within,
            keeps_non_native,
            filters: true,
        };
        admit.filters = within.is_some()
            || vm.has_metadata_match
            || !vm.targets.iter().all(|t| admit.serves(t.model));
        admit
    }

    /// A target must serve the endpoint (TrueFoundry virtual models, "Supported API Types":
    /// every target must support the operation called), natively or translated; a
    /// `/v1/responses` target that does not is kept under `"reject"`, to be refused when
    /// picked (`native.rs`).
    fn serves(&self, m: ModelId) -> bool {
        self.keeps_non_native || serves(self.config, self.vm, self.request, m)
    }

    pub(super) fn admits(&self, m: ModelId) -> bool {
        self.serves(m)
            && (!self.vm.has_metadata_match
                || self
                    .vm
                    .target(m)
                    .is_some_and(|t| self.request.metadata.matches(&t.metadata_match)))
            && self.within.is_none_or(|within| within(m))
    }

    /// `targets` without those not admitted, copied only when some target can fail a check.
    pub(super) fn keep<'t, T: Copy>(
        &self,
        targets: &'t [T],
        model: impl Fn(&T) -> ModelId,
    ) -> Cow<'t, [T]> {
        if self.filters {
            Cow::Owned(
                targets
                    .iter()
                    .filter(|t| self.admits(model(t)))
                    .copied()
                    .collect(),
            )
        } else {
            Cow::Borrowed(targets)
        }
    }
}

/// Keeps the first candidate and the next `max - 1` that may receive a fallback: the targets
/// one request may try under `max_targets_per_request` (Zuplo model load balancing,
/// "Failures and retries": at most two models, the chosen one and its retry model).
pub(super) fn limit(
    candidates: &mut Vec<ModelId>,
    max: usize,
    fallback_candidate: impl Fn(ModelId) -> bool,
) {
    let mut kept = 0;
    candidates.retain(|m| {
        let keep = kept < max && (kept == 0 || fallback_candidate(*m));
        kept += usize::from(keep);
        keep
    });
}

/// Why each target of `vm` that is not among `candidates` was left out, in config order: the
/// first of the checks before the strategy that fails, else the plan's later cuts.
pub fn skipped(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
    candidates: &[ModelId],
    pinned: bool,
) -> Vec<(ModelId, Skip)> {
    let mut out = Vec::new();
    for t in &vm.targets {
        if candidates.contains(&t.model) {
            continue;
        }
        let Some(model) = config.model(t.model) else {
            continue;
        };
        let why = if !translate::serves(Some(vm), request.endpoint, model) {
            Skip::Apis
        } else if !request.metadata.matches(&t.metadata_match) {
            Skip::MetadataMatch
        } else if !when_holds(vm, request, t.model) {
            Skip::When
        } else if pinned {
            Skip::Pinned
        } else if request.endpoint == Endpoint::Responses && !model.stores_responses {
            Skip::StoresResponses
        } else if native::cut_short(config, vm, request, candidates.len()) {
            Skip::BehindNotNative
        } else {
            Skip::MaxTargets
        };
        out.push((t.model, why));
    }
    out
}
