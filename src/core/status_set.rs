//! A set of HTTP status codes as a bit set: configured once, checked per response without
//! allocating.

/// HTTP status codes 100–599.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusSet([u64; 10]);

impl StatusSet {
    /// The empty set.
    pub const EMPTY: StatusSet = StatusSet([0; 10]);

    /// The set of the given codes; codes outside 0–639 are ignored.
    pub fn of(codes: &[u16]) -> Self {
        let mut s = StatusSet::default();
        for c in codes {
            s.insert(*c);
        }
        s
    }

    /// Adds a code.
    pub fn insert(&mut self, code: u16) {
        if let Some(word) = self.0.get_mut(usize::from(code / 64)) {
            *word |= 1 << (code % 64);
        }
    }

    /// Whether the set holds `code`.
    pub fn contains(&self, code: u16) -> bool {
        self.0
            .get(usize::from(code / 64))
            .is_some_and(|w| w & (1 << (code % 64)) != 0)
    }

    /// Every 5xx code.
    pub fn all_5xx() -> Self {
        let mut s = StatusSet::default();
        for c in 500..600 {
            s.insert(c);
        }
        s
    }

    /// The union of two sets.
    pub fn union(mut self, other: StatusSet) -> Self {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_was_inserted() {
        let s = StatusSet::of(&[429, 500, 503]);
        assert!(s.contains(429) && s.contains(500) && s.contains(503));
        assert!(!s.contains(200) && !s.contains(502) && !s.contains(9999));
        let u = s.union(StatusSet::all_5xx());
        assert!(u.contains(599) && u.contains(429) && !u.contains(404));
    }
}
