//! A virtual model's strategy, by its `routing_config.type`: the dispatch from the config's
//! [`Routing`] to the strategy files, over the targets the request may reach ([`Admit`]), with
//! health applied to the order.
//!
//! Health moves unhealthy, then evicted targets back (`health_input.rs`); weighted routing
//! ranks by health itself, from one look at each target's standing, and complexity routing
//! not at all (TrueFoundry virtual models, "Unhealthy target detection": "Health-based
//! demotion does not apply to complexity-based routing").

use super::eligible::Admit;
use super::health_input::{self, HealthInput};
use super::request::Request;
use super::sticky::Session;
use super::{complexity, conditional, hash, latency, priority, round_robin, weighted};
use crate::core::config::{Config, ModelId, Routing, VirtualModel};

/// The strategy's order over the targets the request may reach, health applied, with the
/// sticky session of a weighted virtual model that has one.
pub(super) fn order(
    config: &Config,
    index: usize,
    vm: &VirtualModel,
    request: &Request<'_>,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
    admit: &Admit<'_>,
) -> (Vec<ModelId>, Option<Session>) {
    let mut candidates = match &vm.routing {
        Routing::Weighted(targets) => {
            let kept = admit.keep(targets, |t| t.model);
            return weighted::route(config, vm, &kept, request, health, rng);
        }
        Routing::Complexity {
            targets,
            thresholds,
            ..
        } => {
            let kept = admit.keep(targets, |t| t.model);
            let order = complexity::route(vm, &kept, thresholds, request, health.now_ms, rng);
            return (order, None);
        }
        Routing::Priority(targets) => {
            priority::route(&admit.keep(targets, |t| t.model), health, rng)
        }
        Routing::Conditional(targets) => conditional::order(targets, request)
            .into_iter()
            .filter(|m| admit.admits(*m))
            .collect(),
        Routing::Latency { targets, caller } => {
            let kept = admit.keep(targets, |m| *m);
            latency::route(config, &vm.name, &kept, caller.as_ref(), request, health)
        }
        Routing::Hash { targets, by } => hash::route(
            config,
            index,
            &admit.keep(targets, |m| *m),
            by,
            request,
            rng,
        ),
        Routing::RoundRobin(targets) => {
            let kept = admit.keep(targets, |m| *m);
            let start = request.next_turn(&config.caller_identity, index, kept.len(), rng);
            round_robin::order(&kept, start)
        }
    };
    health_input::apply(&mut candidates, |m| health.standing(vm, m));
    (candidates, None)
}
