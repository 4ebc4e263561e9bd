//! `round-robin-routing` (Zuplo seed, "Round robin"): targets take turns in equal shares; each
//! worker keeps its own cursor, started at a random point so workers do not move in step. The
//! fallback order is the rotation that follows.

use crate::core::config::ModelId;

/// The targets rotated to start at `start`.
pub fn order(targets: &[ModelId], start: usize) -> Vec<ModelId> {
    let n = targets.len();
    (0..n)
        .filter_map(|i| targets.get((start.wrapping_add(i)) % n.max(1)).copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::routing::state::{LocalState, RoutingState};

    #[test]
    fn turns_are_equal_and_fallbacks_follow_the_rotation() {
        let t: Vec<ModelId> = (0..3).map(ModelId).collect();
        let state = LocalState::default();
        let mut rng = fastrand::Rng::with_seed(5);
        let mut firsts = [0; 3];
        for _ in 0..300 {
            let o = order(&t, state.next_cursor(0, 3, &mut rng));
            assert_eq!(o.len(), 3);
            assert_eq!(o[1].0, (o[0].0 + 1) % 3);
            firsts[o[0].0] += 1;
        }
        assert_eq!(firsts, [100, 100, 100]);
    }
}
