//! The routing decision for one request: the requested name looked up, a catalog model routed
//! to itself, a virtual model's targets filtered (`eligible.rs`), ordered by its
//! strategy with health applied (`order.rs`), and cut where the request must stop.

use super::eligible::{self, check_virtual, limit, nothing_left, Admit, Skip};
use super::health_input::HealthInput;
use super::native;
use super::order::order;
use super::request::Request;
use super::sticky::Session;
use crate::core::config::{Config, ModelId, Named, VirtualModel, Visibility};
use crate::core::errors::ErrorReply;

/// The routing decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Candidates in the order they are tried; never empty, no duplicates.
    pub candidates: Vec<ModelId>,
    /// Index of the virtual model in the config, or `None` for a catalog model called directly.
    pub virtual_model: Option<usize>,
    /// The sticky session the request belongs to, if the virtual model pins sessions.
    pub sticky: Option<Session>,
    /// Pinned to its first candidate: retries only, no fallback (a conversation's origin).
    pub pinned: bool,
}

impl Plan {
    /// The target of the first attempt.
    pub fn primary(&self) -> Option<ModelId> {
        self.candidates.first().copied()
    }

    /// The virtual model that made this plan.
    pub fn virtual_model<'c>(&self, config: &'c Config) -> Option<&'c VirtualModel> {
        self.virtual_model
            .and_then(|i| config.virtual_models.get(i))
    }

    /// Why each target of its virtual model that is not a candidate was left out, in config
    /// order (none for a catalog model called directly): the reasons the trace header and
    /// `switchboard explain` print.
    pub fn skipped(&self, config: &Config, request: &Request<'_>) -> Vec<(ModelId, Skip)> {
        match self.virtual_model(config) {
            Some(vm) => eligible::skipped(config, vm, request, &self.candidates, self.pinned),
            None => Vec::new(),
        }
    }
}

/// Decides where a request goes: the ordered candidates, health applied.
pub fn plan(
    config: &Config,
    request: &Request<'_>,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
) -> Result<Plan, ErrorReply> {
    plan_within(config, request, health, rng, None)
}

/// [`plan`], a virtual model's strategy choosing only among the targets `within` keeps (a
/// Responses request that must reach a provider that stores responses, `responses::stored`).
pub fn plan_within(
    config: &Config,
    request: &Request<'_>,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
    within: Option<&dyn Fn(ModelId) -> bool>,
) -> Result<Plan, ErrorReply> {
    let model = request.model;
    match config.lookup(model) {
        None => Err(ErrorReply::model_not_found(model)),
        // Internal models exist only as targets; to a client they are unknown.
        Some(Named::Catalog(_, m)) if m.visibility == Visibility::Internal => {
            Err(ErrorReply::model_not_found(model))
        }
        Some(Named::Catalog(_, m)) if !request.endpoint.served_by(m.apis) => Err(
            ErrorReply::no_capable_target(model, request.endpoint.display_path()),
        ),
        Some(Named::Catalog(id, _)) => Ok(Plan {
            candidates: vec![id],
            virtual_model: None,
            sticky: None,
            pinned: false,
        }),
        Some(Named::Virtual(index, vm)) => {
            check_virtual(config, vm, request)?;
            let admit = Admit::new(config, vm, request, within);
            let (mut candidates, sticky) = order(config, index, vm, request, health, rng, &admit);
            if candidates.is_empty() {
                return Err(nothing_left(vm, request.model));
            }
            native::refuse_or_cut(config, vm, request, &mut candidates)?;
            if let Some(n) = vm.max_targets {
                limit(&mut candidates, n, |m| vm.policy(m).fallback_candidate);
            }
            Ok(Plan {
                candidates,
                virtual_model: Some(index),
                sticky,
                pinned: false,
            })
        }
    }
}

#[cfg(test)]
mod tests;
