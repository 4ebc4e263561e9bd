//! Unicode Normalization Form C (UAX #15), for hash-routing keys: Zuplo model load balancing
//! ("Sticky by expression") converts a key to NFC before hashing it, so two spellings of the same
//! text share a model. The generated `tables` hold the character data; this file is the algorithm:
//! full canonical decomposition, canonical ordering, then canonical composition.

mod tables;

use std::borrow::Cow;

pub use tables::UNICODE_VERSION;

// Hangul syllables decompose and compose by arithmetic (Unicode chapter 3.12).
const S_BASE: u32 = 0xAC00;
const L_BASE: u32 = 0x1100;
const V_BASE: u32 = 0x1161;
const T_BASE: u32 = 0x11A7;
const L_COUNT: u32 = 19;
const V_COUNT: u32 = 21;
const T_COUNT: u32 = 28;
const N_COUNT: u32 = V_COUNT * T_COUNT;
const S_COUNT: u32 = L_COUNT * N_COUNT;

/// Below U+0300 no character decomposes under NFC or combines with the one before it.
const FIRST_ACTIVE: u32 = 0x300;

/// `text` in NFC; borrowed when it already is.
pub fn nfc(text: &str) -> Cow<'_, str> {
    if text.chars().all(|c| (c as u32) < FIRST_ACTIVE) {
        return Cow::Borrowed(text);
    }
    let mut decomposed = Vec::with_capacity(text.len());
    for c in text.chars() {
        decompose(c, &mut decomposed);
    }
    let composed = compose(&decomposed);
    if composed == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(composed)
    }
}

/// Appends the full canonical decomposition of `c`, each character with its combining class,
/// keeping every run of non-starters in canonical order.
fn decompose(c: char, out: &mut Vec<(char, u8)>) {
    let cp = c as u32;
    if let Some(s) = cp.checked_sub(S_BASE).filter(|s| *s < S_COUNT) {
        push_jamo(L_BASE + s / N_COUNT, out);
        push_jamo(V_BASE + (s % N_COUNT) / T_COUNT, out);
        if s % T_COUNT != 0 {
            push_jamo(T_BASE + s % T_COUNT, out);
        }
        return;
    }
    match decomposition(cp) {
        Some((first, second)) => {
            decompose(first, out);
            if let Some(second) = second {
                decompose(second, out);
            }
        }
        None => push_ordered(c, combining_class(cp), out),
    }
}

fn push_jamo(cp: u32, out: &mut Vec<(char, u8)>) {
    if let Some(c) = char::from_u32(cp) {
        out.push((c, 0));
    }
}

/// Pushes `c` and moves it back past non-starters of a higher class (a stable sort of each
/// run of non-starters by class, done one character at a time).
fn push_ordered(c: char, class: u8, out: &mut Vec<(char, u8)>) {
    out.push((c, class));
    if class == 0 {
        return;
    }
    let mut at = out.len() - 1;
    while at > 0 && out.get(at - 1).is_some_and(|&(_, before)| before > class) {
        out.swap(at - 1, at);
        at -= 1;
    }
}

/// Canonical composition: each character joins the last starter unless a character between
/// them has class 0 or a class at least its own (it is "blocked").
fn compose(chars: &[(char, u8)]) -> String {
    let mut out: Vec<char> = Vec::with_capacity(chars.len());
    let mut starter: Option<usize> = None;
    // Class of the last character kept since the starter; None right after it.
    let mut last_class: Option<u8> = None;
    for &(c, class) in chars {
        if let Some(at) = starter {
            let blocked = last_class.is_some_and(|last| last == 0 || last >= class);
            let composite = out.get(at).and_then(|&s| compose_pair(s, c));
            if let (false, Some(composite), Some(slot)) = (blocked, composite, out.get_mut(at)) {
                *slot = composite;
                continue;
            }
        }
        if class == 0 {
            starter = Some(out.len());
            last_class = None;
        } else {
            last_class = Some(class);
        }
        out.push(c);
    }
    out.into_iter().collect()
}

/// The primary composite of `first` followed by `second`, if there is one.
fn compose_pair(first: char, second: char) -> Option<char> {
    let (a, b) = (first as u32, second as u32);
    if (L_BASE..L_BASE + L_COUNT).contains(&a) && (V_BASE..V_BASE + V_COUNT).contains(&b) {
        return char::from_u32(S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT);
    }
    if let Some(s) = a
        .checked_sub(S_BASE)
        .filter(|s| *s < S_COUNT && s % T_COUNT == 0)
    {
        if (T_BASE + 1..T_BASE + T_COUNT).contains(&b) {
            return char::from_u32(S_BASE + s + (b - T_BASE));
        }
        return None;
    }
    let key = u64::from(a) << 21 | u64::from(b);
    let at = tables::COMPOSITION
        .binary_search_by_key(&key, |&i| entry(i) & PAIR_MASK)
        .ok()?;
    let composite = tables::COMPOSITION.get(at).map(|&i| entry(i) >> 42)?;
    char::from_u32(u32::try_from(composite).ok()?)
}

const CODE_POINT_MASK: u64 = (1 << 21) - 1;
const PAIR_MASK: u64 = (1 << 42) - 1;

fn entry(index: u16) -> u64 {
    tables::DECOMPOSITION
        .get(usize::from(index))
        .copied()
        .unwrap_or(0)
}

/// One step of the canonical decomposition of `cp`: one or two characters.
fn decomposition(cp: u32) -> Option<(char, Option<char>)> {
    let at = tables::DECOMPOSITION
        .binary_search_by_key(&u64::from(cp), |&e| e >> 42)
        .ok()?;
    let e = *tables::DECOMPOSITION.get(at)?;
    let part = |shift: u32| u32::try_from((e >> shift) & CODE_POINT_MASK).ok();
    let first = char::from_u32(part(21)?)?;
    let second = part(0).filter(|&b| b != 0).and_then(char::from_u32);
    Some((first, second))
}

/// The canonical combining class of `cp` (0 for starters).
fn combining_class(cp: u32) -> u8 {
    if cp < FIRST_ACTIVE {
        return 0;
    }
    tables::COMBINING_CLASS
        .binary_search_by_key(&cp, |&e| e >> 8)
        .ok()
        .and_then(|at| tables::COMBINING_CLASS.get(at))
        .map_or(0, |&e| (e & 0xff) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn chars(hex: &str) -> String {
        hex.split_whitespace()
            .map(|h| char::from_u32(u32::from_str_radix(h, 16).unwrap()).unwrap())
            .collect()
    }

    /// Expected results computed by Python's unicodedata2 (see scripts/gen_nfc_tables.py).
    fn vectors() -> Vec<(String, String)> {
        include_str!("vectors.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (input, expected) = l.split_once(';').unwrap();
                (chars(input), chars(expected))
            })
            .collect()
    }

    #[test]
    fn matches_python_on_every_vector() {
        let vectors = vectors();
        assert!(vectors.len() > 7_000, "{}", vectors.len());
        let mut changed = 0;
        for (input, expected) in &vectors {
            let got = nfc(input);
            assert_eq!(&*got, expected, "NFC of {input:?}");
            assert_eq!(
                nfc(expected),
                *expected,
                "NFC is idempotent on {expected:?}"
            );
            changed += usize::from(input != expected);
        }
        assert!(
            changed > 5_000,
            "the vectors exercise normalisation: {changed}"
        );
    }

    #[test]
    fn every_other_code_point_is_its_own_nfc() {
        let listed: HashSet<String> = vectors()
            .into_iter()
            .map(|(input, _)| input)
            .filter(|input| input.chars().count() == 1)
            .collect();
        assert!(listed.len() > 1_000);
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let one = c.to_string();
            if !listed.contains(&one) {
                assert_eq!(nfc(&one), one, "U+{:04X}", c as u32);
            }
        }
    }

    #[test]
    fn worked_examples() {
        assert_eq!(nfc("e\u{301}"), "\u{e9}");
        assert_eq!(
            nfc("\u{1100}\u{1161}\u{11a8}"),
            "\u{ac01}",
            "jamo compose to a syllable"
        );
        assert_eq!(
            nfc("a\u{323}\u{302}"),
            nfc("a\u{302}\u{323}"),
            "marks are ordered"
        );
        assert_eq!(
            nfc("\u{212b}"),
            "\u{c5}",
            "the angstrom sign is a singleton"
        );
        assert!(matches!(nfc("plain ascii"), Cow::Borrowed(_)));
        assert!(matches!(nfc("caf\u{e9} \u{4e2d}"), Cow::Borrowed(_)));
        assert_eq!(UNICODE_VERSION, "18.0.0");
    }
}
