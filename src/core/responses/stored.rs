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

use crate::core::config::{Config, HashKey, Model, ModelId, Routing, VirtualModel};
use crate::core::errors::ErrorReply;
use crate::core::routing::{hash, Plan, Request};

/// The provider account part of a catalog name: before the `/`, without case.
fn provider_name(model: &Model) -> String {
    let name = model.name.split_once('/').map_or(&*model.name, |(p, _)| p);
    name.to_ascii_lowercase()
}

fn stores(config: &Config, m: ModelId) -> bool {
    config.model(m).is_some_and(|m| m.stores_responses)
}

/// The plan of a stored-response request: one target, no retry model.
pub fn plan(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
    mut plan: Plan,
) -> Result<Plan, ErrorReply> {
    let storing: Vec<ModelId> = plan
        .candidates
        .iter()
        .copied()
        .filter(|m| stores(config, *m))
        .collect();
    let mut names = storing
        .iter()
        .filter_map(|m| config.model(*m).map(provider_name));
    let one_account = names
        .next()
        .is_some_and(|first| names.all(|name| name == first));
    let chosen = if one_account {
        storing.first().copied()
    } else if has_caller_key(vm, request) {
        // The key's pick is where that caller's responses were created.
        plan.candidates.first().copied()
    } else {
        None
    };
    let Some(target) = chosen.filter(|m| stores(config, *m)) else {
        return Err(ErrorReply::stored_response_unroutable(&vm.name));
    };
    plan.candidates = vec![target];
    plan.pinned = true;
    Ok(plan)
}

/// Whether the virtual model hashes by the caller or an expression key (Zuplo `sticky` by
/// `user` or `expression`) and this request has that key. A conversation key cannot tell.
fn has_caller_key(vm: &VirtualModel, request: &Request<'_>) -> bool {
    match &vm.routing {
        Routing::Hash { by, .. } if !matches!(by, HashKey::Conversation) => {
            hash::key_hash(by, request).is_some()
        }
        _ => false,
    }
}

/// A first-turn create: targets that store nothing are dropped unless the create sets
/// `store: false` or no target stores.
pub fn keep_storing_targets(config: &Config, plan: &mut Plan, store_false: bool) {
    if store_false || !plan.candidates.iter().any(|m| stores(config, *m)) {
        return;
    }
    plan.candidates.retain(|m| stores(config, *m));
}

#[cfg(test)]
mod tests;
