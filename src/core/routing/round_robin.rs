//! `round-robin-routing` (Zuplo model load balancing, "Round robin"): targets take turns in
//! equal shares. "Each gateway instance keeps a separate place in the list for each app,
//! starting from a random point", so "a busy app can't skew a quiet app's rotation": here each
//! worker keeps one cursor per caller (`caller_identity`) per virtual model, started at
//! random, in a table of [`CURSORS`] entries that lets the least recently used go. The
//! fallback order is the rotation that follows.

use crate::core::caller::Caller;
use crate::core::config::ModelId;
use std::num::NonZeroUsize;

/// Cursors one worker keeps: callers beyond it start again at a random point.
pub const CURSORS: usize = 1024;

/// The targets rotated to start at `start`.
pub fn order(targets: &[ModelId], start: usize) -> Vec<ModelId> {
    let n = targets.len();
    (0..n)
        .filter_map(|i| targets.get((start.wrapping_add(i)) % n.max(1)).copied())
        .collect()
}

/// Whose cursor: a config (`scope`: an adapter's id for a loaded config, so a reload starts
/// afresh), one of its virtual models, and a caller.
type Key = (u64, usize, Caller);

/// One worker's round-robin cursors, least recently used out past [`CURSORS`].
pub struct Cursors(lru::LruCache<Key, usize>);

impl Default for Cursors {
    fn default() -> Self {
        Cursors(lru::LruCache::new(
            NonZeroUsize::new(CURSORS).unwrap_or(NonZeroUsize::MIN),
        ))
    }
}

impl std::fmt::Debug for Cursors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cursors({} of {CURSORS})", self.0.len())
    }
}

impl Cursors {
    /// The next position of `caller` in virtual model `virtual_model` (of config `scope`) with
    /// `len` targets; a caller seen for the first time starts at random.
    pub fn next(
        &mut self,
        (scope, virtual_model, caller): Key,
        len: usize,
        rng: &mut fastrand::Rng,
    ) -> usize {
        let len = len.max(1);
        let slot = self
            .0
            .get_or_insert_mut((scope, virtual_model, caller), || rng.usize(0..len));
        let at = *slot % len;
        *slot = at.wrapping_add(1);
        at
    }

    /// How many callers it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(n: u32) -> Caller {
        Caller::of(format!("Bearer key-{n}").as_bytes())
    }

    #[test]
    fn turns_are_equal_and_fallbacks_follow_the_rotation() {
        let t: Vec<ModelId> = (0..3).map(ModelId).collect();
        let mut cursors = Cursors::default();
        let mut rng = fastrand::Rng::with_seed(5);
        let mut firsts = [0; 3];
        for _ in 0..300 {
            let o = order(&t, cursors.next((0, 0, caller(1)), 3, &mut rng));
            assert_eq!(o.len(), 3);
            assert_eq!(o[1].0, (o[0].0 + 1) % 3);
            firsts[o[0].0] += 1;
        }
        assert_eq!(firsts, [100, 100, 100]);
    }

    #[test]
    fn a_busy_caller_does_not_skew_a_quiet_callers_rotation() {
        let mut cursors = Cursors::default();
        let mut rng = fastrand::Rng::with_seed(9);
        let quiet: Vec<usize> = (0..6)
            .map(|_| {
                // 7 requests of a busy app between each of the quiet app's.
                for _ in 0..7 {
                    cursors.next((0, 0, caller(1)), 3, &mut rng);
                }
                cursors.next((0, 0, caller(2)), 3, &mut rng)
            })
            .collect();
        // The quiet app still takes each target in turn, whatever the busy one does.
        for pair in quiet.windows(2) {
            assert_eq!(pair[1], (pair[0] + 1) % 3, "{quiet:?}");
        }
        // Each virtual model and each config has its own cursor too.
        let a = cursors.next((0, 1, caller(2)), 3, &mut rng);
        assert_eq!(cursors.next((0, 1, caller(2)), 3, &mut rng), (a + 1) % 3);
    }

    #[test]
    fn the_table_keeps_the_1024_most_recent_callers() {
        let mut cursors = Cursors::default();
        let mut rng = fastrand::Rng::with_seed(1);
        let first = cursors.next((0, 0, caller(0)), 1000, &mut rng);
        for n in 1..CURSORS as u32 {
            cursors.next((0, 0, caller(n)), 1000, &mut rng);
        }
        // Caller 0 used again: now the most recent, so the next new caller evicts caller 1.
        assert_eq!(cursors.next((0, 0, caller(0)), 1000, &mut rng), first + 1);
        cursors.next((0, 0, caller(5000)), 1000, &mut rng);
        assert_eq!(cursors.len(), CURSORS);
        assert_eq!(cursors.next((0, 0, caller(0)), 1000, &mut rng), first + 2);
        let one = (0, 0, caller(1));
        assert!(!cursors.0.contains(&one), "the least recently used went");
    }
}
