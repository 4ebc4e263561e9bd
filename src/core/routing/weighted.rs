//! `weight-based-routing` (TrueFoundry virtual models, "Weight-based routing"): traffic in
//! proportion to integer weights that sum to 100; weight 0 drains a target.
//!
//! The primary is drawn with the caller's RNG; the rest follow by descending weight (ties in
//! config order), so a fallback prefers the target meant to carry more traffic. Drained
//! targets come last: they never take first attempts but still stand behind the others.
//!
//! The draw is among healthy targets only (TrueFoundry virtual models, "Routing Strategies":
//! each strategy "picks among healthy targets"; "Unhealthy target detection"): with 50/30/20
//! and the first unhealthy, the others get 60/40, not 80/20 as they would if the unhealthy
//! target's share went to whichever target is next by weight. Unhealthy targets, then evicted
//! ones, follow, each group ordered the same way among themselves.

use super::health_input::{rank, HealthInput};
use super::request::Request;
use super::sticky::{self, Session};
use crate::core::config::{Config, ModelId, VirtualModel, WeightedTarget};
use crate::core::health::record::Standing;

/// The order of a request's targets (those it may reach), with its sticky session when
/// `sticky_routing` holds one: the session's target first, else a weighted draw; health
/// applied either way.
pub fn route(
    config: &Config,
    vm: &VirtualModel,
    targets: &[WeightedTarget],
    request: &Request<'_>,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
) -> (Vec<ModelId>, Option<Session>) {
    // `missing_identifier: "none"`: a request with none of the identifiers has no session,
    // and is weighted like any other.
    let rule = vm
        .sticky
        .as_ref()
        .filter(|rule| rule.shared_when_missing || sticky::identified(rule, request));
    let standing = |m| health.standing(vm, m);
    match rule {
        Some(rule) => {
            let mut session = sticky::session(&vm.name, rule, request, health.now_ms);
            let clock = sticky::clock(rule, health.now_ms);
            let pinned = sticky::pinned_target(config, &vm.name, session, request, clock);
            let (order, home) = sticky::order(config, targets, session, pinned, standing);
            session.home = home;
            (order, Some(session))
        }
        None => (order_by_health(targets, standing, rng), None),
    }
}

/// Orders the targets by standing: a weighted draw among the healthy targets, the other
/// healthy ones by weight, then the unhealthy and the evicted targets, each group in the
/// same order among themselves.
pub fn order_by_health(
    targets: &[WeightedTarget],
    standing: impl Fn(ModelId) -> Standing,
    rng: &mut fastrand::Rng,
) -> Vec<ModelId> {
    // Every target healthy, the usual case: no list of ranks to build.
    if targets.iter().all(|t| rank(standing(t.model)) == 0) {
        return order(targets, rng);
    }
    let ranks: Vec<u8> = targets.iter().map(|t| rank(standing(t.model))).collect();
    let mut out = Vec::with_capacity(targets.len());
    for group in 0..3u8 {
        let members: Vec<WeightedTarget> = targets
            .iter()
            .zip(&ranks)
            .filter(|(_, r)| **r == group)
            .map(|(t, _)| *t)
            .collect();
        out.extend(order(&members, rng));
    }
    out
}

/// Orders the targets for one request: a weighted draw first, then by weight.
pub fn order(targets: &[WeightedTarget], rng: &mut fastrand::Rng) -> Vec<ModelId> {
    let primary = pick(targets, rng);
    let mut rest: Vec<(usize, &WeightedTarget)> = targets
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != primary)
        .collect();
    rest.sort_by(|(ia, a), (ib, b)| b.weight.cmp(&a.weight).then(ia.cmp(ib)));
    primary
        .and_then(|p| targets.get(p))
        .map(|t| t.model)
        .into_iter()
        .chain(rest.into_iter().map(|(_, t)| t.model))
        .collect()
}

/// Index of the target drawn in proportion to weight, or `None` if every weight is 0.
pub fn pick(targets: &[WeightedTarget], rng: &mut fastrand::Rng) -> Option<usize> {
    let total: u32 = targets.iter().map(|t| t.weight).sum();
    if total == 0 {
        return None;
    }
    let mut ticket = rng.u32(0..total);
    for (i, t) in targets.iter().enumerate() {
        if ticket < t.weight {
            return Some(i);
        }
        ticket -= t.weight;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(weights: &[u32]) -> Vec<WeightedTarget> {
        weights
            .iter()
            .enumerate()
            .map(|(i, w)| WeightedTarget {
                model: ModelId(i),
                weight: *w,
            })
            .collect()
    }

    #[test]
    fn shares_follow_weights_within_statistical_bands() {
        let t = targets(&[70, 20, 10]);
        let mut rng = fastrand::Rng::with_seed(42);
        let mut counts = [0u32; 3];
        let draws = 10_000;
        for _ in 0..draws {
            counts[pick(&t, &mut rng).unwrap()] += 1;
        }
        // Bands of about 4 standard deviations around each expected share.
        for (count, (expected, band)) in counts.iter().zip([(7000, 190), (2000, 160), (1000, 120)])
        {
            assert!(count.abs_diff(expected) < band, "{counts:?}");
        }
    }

    #[test]
    fn healthy_targets_share_in_proportion_to_their_weights() {
        let t = targets(&[50, 30, 20]);
        let standing = |m: ModelId| {
            if m.0 == 0 {
                Standing::Unhealthy
            } else {
                Standing::Healthy
            }
        };
        let mut rng = fastrand::Rng::with_seed(16);
        let mut firsts = [0u32; 3];
        for _ in 0..10_000 {
            let o = order_by_health(&t, standing, &mut rng);
            assert_eq!(o.len(), 3);
            assert_eq!(o[2], ModelId(0), "the unhealthy target goes last");
            firsts[o[0].0] += 1;
        }
        // 60/40 (standard deviation 49 over 10,000 draws; bands of 4 of them).
        assert_eq!(firsts[0], 0);
        assert!(firsts[1].abs_diff(6000) < 200, "{firsts:?}");
        assert!(firsts[2].abs_diff(4000) < 200, "{firsts:?}");
    }

    #[test]
    fn unhealthy_and_evicted_targets_follow_in_their_own_weighted_order() {
        let t = targets(&[40, 10, 30, 20]);
        let standing = |m: ModelId| match m.0 {
            0 | 2 => Standing::Evicted,
            1 => Standing::Unhealthy,
            _ => Standing::Healthy,
        };
        let mut rng = fastrand::Rng::with_seed(5);
        let mut evicted_first = [0u32; 2];
        for _ in 0..2_000 {
            let o = order_by_health(&t, standing, &mut rng);
            assert_eq!(&o[..2], &[ModelId(3), ModelId(1)]);
            evicted_first[usize::from(o[2] == ModelId(2))] += 1;
        }
        // Among the evicted, 40/30 by weight: 4/7 of 2,000 is about 1,143.
        assert!(evicted_first[0].abs_diff(1143) < 100, "{evicted_first:?}");
    }

    #[test]
    fn zero_weight_target_is_never_primary_but_stays_last() {
        let t = targets(&[0, 100]);
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..1000 {
            assert_eq!(order(&t, &mut rng), vec![ModelId(1), ModelId(0)]);
        }
    }

    #[test]
    fn all_zero_weights_pick_nothing_but_still_order_every_target() {
        let t = targets(&[0, 0]);
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(pick(&t, &mut rng), None);
        assert_eq!(order(&t, &mut rng), vec![ModelId(0), ModelId(1)]);
    }

    #[test]
    fn fallback_order_is_by_descending_weight_then_config_order() {
        let t = targets(&[10, 30, 30, 30]);
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..200 {
            let o = order(&t, &mut rng);
            assert_eq!(o.len(), 4);
            let rest: Vec<usize> = o[1..].iter().map(|m| m.0).collect();
            let mut expected: Vec<usize> = vec![1, 2, 3, 0];
            expected.retain(|i| *i != o[0].0);
            assert_eq!(rest, expected);
        }
    }

    #[test]
    fn same_seed_gives_same_decisions() {
        let t = targets(&[50, 50]);
        let a: Vec<_> = (0..50)
            .scan(fastrand::Rng::with_seed(9), |r, _| Some(order(&t, r)))
            .collect();
        let b: Vec<_> = (0..50)
            .scan(fastrand::Rng::with_seed(9), |r, _| Some(order(&t, r)))
            .collect();
        assert_eq!(a, b);
    }
}
