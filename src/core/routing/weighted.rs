//! `weight-based-routing` (TrueFoundry seed, "Weight-based routing"): traffic in proportion
//! to integer weights that sum to 100; weight 0 drains a target.
//!
//! The primary is drawn with the caller's RNG; the rest follow by descending weight (ties in
//! config order), so a fallback prefers the target meant to carry more traffic. Drained
//! targets come last: they never take first attempts but still stand behind the others.

use crate::core::config::{ModelId, WeightedTarget};

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
