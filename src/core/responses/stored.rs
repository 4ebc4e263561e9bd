//! Requests that read or continue a response the provider stored under its own id.
//!
//! Zuplo model load balancing, "Stored responses": a stored response lives on the provider
//! account that created it, so a create with a raw `previous_response_id`, a `conversation`
//! or an `item_reference` item, and a retrieve, input-items list or delete, must reach that
//! account:
//!
//! | When | Stored-response requests |
//! |---|---|
//! | every target that stores responses has the same provider name | go to that provider |
//! | the strategy hashes by the caller or a header/metadata key, and the request has a key | go to the model the key picks |
//! | anything else | 400, and the log names the fix |
//!
//! The provider name is the catalog name's part before the `/`, compared without case. Such
//! requests get no retry model. A provider that stores nothing (`stores_responses: false`)
//! never gets them, and gets a create only when it sets `store: false` or no target stores.
//!
//! "The models in the list" are the virtual model's targets this request may reach (serving
//! the endpoint, `metadata_match` and `when` holding), before health and
//! `max_targets_per_request` shape its plan: a plan cut to one target would show one provider
//! name where the list has two, and health would move a key off the model that holds its
//! caller's responses.

use crate::core::config::{Config, HashKey, Model, ModelId, Routing, VirtualModel};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::routing::{self, hash, HealthInput, Plan, Request};

/// What a Responses request to a virtual model asks of the state providers store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// It reads or continues a response stored under the provider's raw id.
    Held,
    /// A create that stores its response (it does not set `store: false`).
    Stores,
    /// A create with `store: false`.
    Stateless,
}

/// The provider account part of a catalog name: before the `/`, without case.
fn provider_name(model: &Model) -> String {
    let name = model.name.split_once('/').map_or(&*model.name, |(p, _)| p);
    name.to_ascii_lowercase()
}

/// Whether a target serves the Responses API natively.
fn native(config: &Config, m: ModelId) -> bool {
    config
        .model(m)
        .is_some_and(|m| Endpoint::Responses.served_by(m.apis))
}

/// Whether a target keeps Responses API state: it serves the API natively and its provider
/// stores responses.
fn stores(config: &Config, m: ModelId) -> bool {
    native(config, m) && config.model(m).is_some_and(|m| m.stores_responses)
}

/// The plan of a Responses request (not a pinned follow-up of an id minted here) to the
/// virtual model `index`.
pub fn plan(
    config: &Config,
    index: usize,
    vm: &VirtualModel,
    request: &Request<'_>,
    storage: Storage,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
) -> Result<Plan, ErrorReply> {
    match storage {
        Storage::Held => held(config, index, vm, request, health, rng),
        Storage::Stores => {
            // The models that store are chosen from the whole list, before health and
            // `max_targets_per_request` shape the plan, so a key picks among the same models
            // for a create as for the requests that read it back. A target that does not serve
            // the Responses API natively stays, for its own 400 (`routing::native`).
            let storing = storing(config, vm, request)?;
            if storing.is_empty() {
                return routing::plan(config, request, health, rng);
            }
            let within = |m: ModelId| storing.contains(&m) || !native(config, m);
            routing::plan_within(config, request, health, rng, Some(&within))
        }
        Storage::Stateless => routing::plan(config, request, health, rng),
    }
}

/// The targets that may take the request and keep Responses API state, in config order: the
/// models "in the list" that store responses, whatever the plan later cuts.
fn storing(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
) -> Result<Vec<ModelId>, ErrorReply> {
    let mut out = routing::eligible(config, vm, request)?;
    out.retain(|m| stores(config, *m));
    Ok(out)
}

/// A request for a response stored under a raw id: one target, no retry model, decided on
/// the virtual model's whole list so the same request always gets the same answer.
fn held(
    config: &Config,
    index: usize,
    vm: &VirtualModel,
    request: &Request<'_>,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
) -> Result<Plan, ErrorReply> {
    let storing = storing(config, vm, request)?;
    let mut names = storing
        .iter()
        .filter_map(|m| config.model(*m).map(provider_name));
    let one_account = names
        .next()
        .is_some_and(|first| names.all(|name| name == first));
    let (target, sticky) = if one_account {
        // Every model that stores is on that account, so each holds the response: the
        // strategy picks among them, health applied. One it cannot order (a complexity tier
        // below the request's) still holds it.
        let within = |m: ModelId| storing.contains(&m);
        match routing::plan_within(config, request, health, rng, Some(&within)) {
            Ok(p) => (p.primary(), p.sticky),
            Err(_) => (storing.first().copied(), None),
        }
    } else if let Some(key) = caller_key(vm, request) {
        // "Go to the model the key picks, where that caller's responses were created": the
        // key's pick among the models that store, as for its creates, whatever its health,
        // since another account would answer 404.
        (hash::order(config, &storing, key).first().copied(), None)
    } else {
        (None, None)
    };
    let target = target.ok_or_else(|| ErrorReply::stored_response_unroutable(&vm.name))?;
    Ok(Plan {
        candidates: vec![target],
        virtual_model: Some(index),
        sticky,
        pinned: true,
    })
}

/// The key of a virtual model that hashes by the caller or an expression key (Zuplo `sticky`
/// by `user` or `expression`), when this request has one. A conversation key cannot tell.
fn caller_key(vm: &VirtualModel, request: &Request<'_>) -> Option<u64> {
    match &vm.routing {
        Routing::Hash { by, .. } if !matches!(by, HashKey::Conversation) => {
            hash::key_hash(by, request)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
