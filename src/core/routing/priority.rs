//! `priority-based-routing` (TrueFoundry virtual models, "Priority-based routing"; agentgateway
//! virtual models, "Failover routing"): the lowest `priority` value wins, 0 being the highest.
//!
//! Targets that share a priority form a group (priorities 0, 0, 1 become `[[a, b], [c]]`). The
//! group shares its load by a composite of health and latency (agentgateway virtual models,
//! "Failover routing": healthier, faster targets are favoured): each member's share is its health
//! score times how much faster than the group's average it answers. Later groups stand behind it in
//! the fallback order, and take over when health ordering (`health_input.rs`) moves the group's
//! targets back: unhealthy by the failure window (TrueFoundry virtual models, "Unhealthy target
//! detection") or evicted; with `failure_window: {failures: 0}` only eviction does (agentgateway
//! virtual models, "Failover routing": "only after every target in the current group is evicted").
//! A lower score alone never spills over to the next group.

use super::health_input::HealthInput;
use crate::core::config::{ModelId, PriorityTarget};

/// The order of a request's targets (those it may reach), each group's share from its
/// members' health and speed.
pub fn route(
    targets: &[PriorityTarget],
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
) -> Vec<ModelId> {
    let models: Vec<ModelId> = targets.iter().map(|t| t.model).collect();
    let share = health.shares(&models);
    let of = |m: ModelId| share.iter().find(|(x, _)| *x == m).map_or(1.0, |(_, s)| *s);
    order(targets, of, rng)
}

/// Orders the targets for one request: groups by ascending priority; inside a group the first
/// is drawn in proportion to `share` (health and latency), the rest follow by share.
pub fn order(
    targets: &[PriorityTarget],
    share: impl Fn(ModelId) -> f64,
    rng: &mut fastrand::Rng,
) -> Vec<ModelId> {
    let mut sorted: Vec<&PriorityTarget> = targets.iter().collect();
    // Stable: equal priorities keep config order.
    sorted.sort_by_key(|t| t.priority);
    let mut out = Vec::with_capacity(sorted.len());
    for group in sorted.chunk_by(|a, b| a.priority == b.priority) {
        let mut members: Vec<(ModelId, f64)> = group
            .iter()
            .map(|t| (t.model, share(t.model).max(1e-6)))
            .collect();
        let total: f64 = members.iter().map(|(_, s)| s).sum();
        let mut ticket = rng.f64() * total;
        let first = members
            .iter()
            .position(|(_, s)| {
                ticket -= s;
                ticket < 0.0
            })
            .unwrap_or(0);
        if first < members.len() {
            let chosen = members.remove(first);
            out.push(chosen.0);
        }
        members.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.extend(members.into_iter().map(|(m, _)| m));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(priorities: &[u32]) -> Vec<PriorityTarget> {
        priorities
            .iter()
            .enumerate()
            .map(|(i, p)| PriorityTarget {
                model: ModelId(i),
                priority: *p,
            })
            .collect()
    }

    #[test]
    fn healthier_and_faster_members_take_more_of_the_group() {
        let t = targets(&[0, 0, 1]);
        let mut rng = fastrand::Rng::with_seed(4);
        let mut firsts = [0u32; 3];
        for _ in 0..10_000 {
            let o = order(&t, |m| if m.0 == 0 { 3.0 } else { 1.0 }, &mut rng);
            assert_eq!(o[2], ModelId(2), "the next group still stands behind");
            firsts[o[0].0] += 1;
        }
        assert!(firsts[0].abs_diff(7500) < 180, "{firsts:?}");
    }

    #[test]
    fn lowest_priority_value_is_always_first() {
        let t = targets(&[2, 0, 1]);
        let mut rng = fastrand::Rng::with_seed(5);
        for _ in 0..100 {
            assert_eq!(
                order(&t, |_| 1.0, &mut rng),
                vec![ModelId(1), ModelId(2), ModelId(0)]
            );
        }
    }

    #[test]
    fn a_group_shares_first_attempts_and_the_next_group_stands_behind() {
        // Priorities 0, 0, 1 become [[a, b], [c]] (agentgateway virtual models, "Failover
        // routing").
        let t = targets(&[0, 0, 1]);
        let mut rng = fastrand::Rng::with_seed(11);
        let mut firsts = [0u32; 3];
        for _ in 0..10_000 {
            let o = order(&t, |_| 1.0, &mut rng);
            assert_eq!(o.len(), 3);
            assert_eq!(o[2], ModelId(2), "the backup group is last");
            firsts[o[0].0] += 1;
        }
        assert_eq!(firsts[2], 0);
        // Equal share: 5000 each, band of about 4 standard deviations.
        assert!(firsts[0].abs_diff(5000) < 200, "{firsts:?}");
    }
}
