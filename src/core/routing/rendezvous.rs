//! Stable hashing for decisions every Envoy instance must agree on without shared state:
//! FNV-1a over the parts with a separator, finished with splitmix64 for an even spread; and
//! weighted rendezvous (highest-random-weight) scores on top of it.
//!
//! These values must not change between versions: a change would move every sticky session at
//! once. The golden tests pin them.

/// A 64-bit hash of `parts` (a zero byte between them, so `["ab","c"]` differs from `["a","bc"]`).
pub fn hash64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    mix(h)
}

/// splitmix64's finalizer.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Weighted rendezvous score of `target` for `key`: the highest score wins, and a target wins
/// in proportion to its weight (score = -weight / ln(u), u uniform in (0, 1)). Weight 0 never
/// wins.
pub fn rendezvous_score(key: u64, target: &str, weight: u32) -> f64 {
    rendezvous_score_f64(key, target, f64::from(weight))
}

/// [`rendezvous_score`] for a fractional weight (latency routing weighs by 1 / TPOT).
pub fn rendezvous_score_f64(key: u64, target: &str, weight: f64) -> f64 {
    if weight <= 0.0 || weight.is_nan() {
        return f64::NEG_INFINITY;
    }
    let h = hash64(&[&key.to_le_bytes(), target.as_bytes()]);
    // 53 random bits, shifted into (0, 1).
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -weight / u.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_values_do_not_drift() {
        assert_eq!(hash64(&[b"session-1"]), 10_224_068_638_838_706_759);
        assert_ne!(hash64(&[b"ab", b"c"]), hash64(&[b"a", b"bc"]));
        let s = rendezvous_score(42, "openai-main/gpt-4o", 80);
        assert!((s - 877.611_809).abs() < 1e-5, "{s}");
    }

    #[test]
    fn rendezvous_wins_in_proportion_to_weight() {
        let names = ["a", "b", "c"];
        let weights = [70, 20, 10];
        let mut wins = [0u32; 3];
        for key in 0..10_000u64 {
            let best = (0..3)
                .max_by(|&i, &j| {
                    rendezvous_score(key, names[i], weights[i])
                        .total_cmp(&rendezvous_score(key, names[j], weights[j]))
                })
                .unwrap();
            wins[best] += 1;
        }
        for (w, (expected, band)) in wins.iter().zip([(7000, 190), (2000, 160), (1000, 120)]) {
            assert!(w.abs_diff(expected) < band, "{wins:?}");
        }
        assert_eq!(rendezvous_score(1, "a", 0), f64::NEG_INFINITY);
    }

    #[test]
    fn removing_a_target_only_moves_its_own_keys() {
        fn winner(key: u64, names: &[&'static str]) -> &'static str {
            names
                .iter()
                .copied()
                .max_by(|a, b| rendezvous_score(key, a, 1).total_cmp(&rendezvous_score(key, b, 1)))
                .unwrap()
        }
        let before = winner;
        for key in 0..2_000u64 {
            let all = before(key, &["a", "b", "c"]);
            if all != "c" {
                assert_eq!(before(key, &["a", "b"]), all, "key {key} moved");
            }
        }
    }
}
