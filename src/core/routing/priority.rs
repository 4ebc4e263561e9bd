//! `priority-based-routing` (TrueFoundry seed, "Priority-based routing"; agentgateway seed,
//! "Failover routing"): the lowest `priority` value wins, 0 being the highest.
//!
//! Targets that share a priority form a group (priorities 0, 0, 1 become `[[a, b], [c]]`). The
//! group shares its load; later groups stand behind it in the fallback order, and take over when
//! health ordering (`standing.rs`) moves an evicted group back. The share inside a group is
//! equal, drawn with the caller's RNG; weighting it by health score and latency is not done yet.

use crate::core::config::{ModelId, PriorityTarget};

/// Orders the targets for one request: groups by ascending priority, a random rotation
/// inside each group so the group shares the load.
pub fn order(targets: &[PriorityTarget], rng: &mut fastrand::Rng) -> Vec<ModelId> {
    let mut sorted: Vec<&PriorityTarget> = targets.iter().collect();
    // Stable: equal priorities keep config order before the rotation.
    sorted.sort_by_key(|t| t.priority);
    let mut out = Vec::with_capacity(sorted.len());
    for group in sorted.chunk_by(|a, b| a.priority == b.priority) {
        let start = rng.usize(0..group.len());
        out.extend(
            group
                .iter()
                .cycle()
                .skip(start)
                .take(group.len())
                .map(|t| t.model),
        );
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
    fn lowest_priority_value_is_always_first() {
        let t = targets(&[2, 0, 1]);
        let mut rng = fastrand::Rng::with_seed(5);
        for _ in 0..100 {
            assert_eq!(
                order(&t, &mut rng),
                vec![ModelId(1), ModelId(2), ModelId(0)]
            );
        }
    }

    #[test]
    fn a_group_shares_first_attempts_and_the_next_group_stands_behind() {
        // Priorities 0, 0, 1 become [[a, b], [c]] (agentgateway seed).
        let t = targets(&[0, 0, 1]);
        let mut rng = fastrand::Rng::with_seed(11);
        let mut firsts = [0u32; 3];
        for _ in 0..10_000 {
            let o = order(&t, &mut rng);
            assert_eq!(o.len(), 3);
            assert_eq!(o[2], ModelId(2), "the backup group is last");
            firsts[o[0].0] += 1;
        }
        assert_eq!(firsts[2], 0);
        // Equal share: 5000 each, band of about 4 standard deviations.
        assert!(firsts[0].abs_diff(5000) < 200, "{firsts:?}");
    }
}
