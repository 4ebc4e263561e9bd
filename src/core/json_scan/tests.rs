//! The scanner against serde_json (the reference: `request::fields_by_serde`): on every input
//! they agree on acceptance and on every member's key and value span.

use super::top_level_members;
use crate::core::request::fields_by_serde;

/// Scanner `Some` must be serde Ok (on UTF-8 text) with the same members; scanner `None` must
/// be serde Err or text that is not UTF-8 (else it is only slower). Returns whether the
/// scanner accepted.
fn agree(text: impl AsRef<[u8]>) -> bool {
    let bytes = text.as_ref();
    let scanned = top_level_members(bytes);
    let reference = match std::str::from_utf8(bytes) {
        Ok(text) => fields_by_serde(bytes, text),
        Err(_) => Err(crate::core::errors::ErrorReply::invalid_json("not UTF-8")),
    };
    let text = String::from_utf8_lossy(bytes);
    match (&scanned, &reference) {
        (Some(s), Ok(r)) => assert_eq!(s, r, "members differ for {text:?}"),
        (None, Err(_)) => {}
        (Some(_), Err(e)) => panic!("scanner accepts what serde refuses ({e:?}): {text:?}"),
        (None, Ok(_)) => {}
    }
    scanned.is_some()
}

const WS: [&str; 5] = ["", "", " ", "\n\t", "\r "];
const KEYS: [&str; 9] = [
    "model",
    "stream",
    "messages",
    "mo\\u0064el",
    "k\\\"q",
    "\\u00e9t\\u00e9",
    "\\ud83d\\ude00",
    "",
    "m\u{e9}\u{20ac}\u{1d11e}",
];
const PIECES: [&str; 24] = [
    "a",
    // Longer than the SIMD steps (16, 32 and 64 bytes), so the vector loops and their tails run.
    "the plain run of a long prompt, longer than one 64-byte step of the scan",
    "\u{e9}t\u{e9} \u{20ac}\u{1d11e} caf\u{e9} na\u{ef}ve \u{4e2d}\u{6587}\u{6587}\u{672c} plain words after them",
    "hello world",
    "model",
    "\\\"model\\\": \\\"x\\\"",
    "\\\"",
    "\\\\",
    "\\/",
    "\\b",
    "\\f",
    "\\n",
    "\\r",
    "\\t",
    "\\u0000",
    "\\u00E9",
    "\\ud800",
    "\\uDFFF",
    "\\ud83d\\ude00",
    "\u{e9}",
    "\u{20ac}",
    "\u{1d11e}",
    "{[,:]}",
    "\u{7f}",
];
const NUMBERS: [&str; 14] = [
    "0",
    "-0",
    "7",
    "123",
    "-45",
    "1.5",
    "0.25e10",
    "1E+5",
    "2e-3",
    "-0.0E0",
    "10.01",
    "98765432109876543210",
    "1e400",
    "-1.7976931348623157e308",
];

fn ws(rng: &mut fastrand::Rng, out: &mut String) {
    out.push_str(WS[rng.usize(..WS.len())]);
}

fn string(rng: &mut fastrand::Rng, out: &mut String) {
    out.push('"');
    for _ in 0..rng.usize(0..4) {
        out.push_str(PIECES[rng.usize(..PIECES.len())]);
    }
    out.push('"');
}

/// A valid value, nesting at most `depth` more levels.
fn value(rng: &mut fastrand::Rng, depth: usize, out: &mut String) {
    match rng.usize(0..if depth == 0 { 4 } else { 6 }) {
        0 => string(rng, out),
        1 => out.push_str(NUMBERS[rng.usize(..NUMBERS.len())]),
        2 => out.push_str(["true", "false", "null"][rng.usize(0..3)]),
        3 => string(rng, out),
        4 => {
            out.push('[');
            for i in 0..rng.usize(0..3) {
                if i > 0 {
                    out.push(',');
                }
                ws(rng, out);
                value(rng, depth - 1, out);
                ws(rng, out);
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            for i in 0..rng.usize(0..3) {
                if i > 0 {
                    out.push(',');
                }
                member(rng, depth - 1, out);
            }
            out.push('}');
        }
    }
}

fn member(rng: &mut fastrand::Rng, depth: usize, out: &mut String) {
    ws(rng, out);
    out.push('"');
    out.push_str(KEYS[rng.usize(..KEYS.len())]);
    out.push('"');
    ws(rng, out);
    out.push(':');
    ws(rng, out);
    value(rng, depth, out);
    ws(rng, out);
}

/// Arrays and objects nested `n` deep around a scalar.
fn deep(rng: &mut fastrand::Rng, n: usize, out: &mut String) {
    let mut closers = Vec::new();
    for _ in 0..n {
        if rng.bool() {
            out.push('[');
            closers.push(']');
        } else {
            out.push_str("{\"k\":");
            closers.push('}');
        }
    }
    value(rng, 0, out);
    out.extend(closers.into_iter().rev());
}

/// A valid top-level object.
fn object(rng: &mut fastrand::Rng) -> String {
    let mut out = String::new();
    ws(rng, &mut out);
    out.push('{');
    let n = rng.usize(0..5);
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        if rng.usize(0..60) == 0 {
            out.push_str("\"deep\":");
            let n = rng.usize(120..140);
            deep(rng, n, &mut out);
        } else {
            member(rng, 3, &mut out);
        }
    }
    out.push('}');
    ws(rng, &mut out);
    out
}

const NOISE: [&[u8]; 24] = [
    b"\"", b"\\", b"{", b"}", b"[", b"]", b",", b":", b" ", b"\x01", b"\x1f", b"\x0b", b"\x0c",
    b"x", b"0", b"-", b".", b"e", b"\xff", b"\xc3", b"\\x", b"\\u12g4", b"\\u12", b"\\ud800",
];

/// One random damage to `text`.
fn mutate(rng: &mut fastrand::Rng, text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    let at = rng.usize(..=b.len());
    let noise = NOISE[rng.usize(..NOISE.len())];
    match rng.usize(0..5) {
        0 => b.truncate(at),
        1 if at < b.len() => {
            b.remove(at);
        }
        2 if at < b.len() => {
            b.splice(at..=at, noise.iter().copied());
        }
        3 => b.extend_from_slice(noise),
        _ => {
            b.splice(at..at, noise.iter().copied());
        }
    }
    b
}

/// The differential test: valid objects (nesting near and past 128, every escape, multi-byte
/// UTF-8, every number shape, duplicate keys, `"model"` inside strings), each damaged several
/// ways, some cut at every split point. Deterministic seed; small inputs keep it fast.
#[test]
fn scanner_agrees_with_serde_json_on_every_input() {
    let mut rng = fastrand::Rng::with_seed(31);
    let (mut inputs, mut valid, mut valid_missed, mut accepted) = (0usize, 0usize, 0usize, 0usize);
    let check = |bytes: &[u8], accepted: &mut usize| {
        *accepted += usize::from(agree(bytes));
    };
    while inputs < 120_000 {
        let text = object(&mut rng);
        valid += 1;
        inputs += 1;
        if !agree(&text) {
            valid_missed += 1;
            eprintln!("valid input the scanner left to serde: {text:?}");
        }
        if rng.usize(0..25) == 0 {
            for cut in 0..text.len() {
                check(
                    text.as_bytes().get(..cut).unwrap_or_default(),
                    &mut accepted,
                );
                inputs += 1;
            }
        }
        for _ in 0..4 {
            check(&mutate(&mut rng, &text), &mut accepted);
            inputs += 1;
        }
    }
    eprintln!("{inputs} inputs: {valid} valid objects, {accepted} damaged ones still valid");
    assert_eq!(valid_missed, 0, "of {valid} valid objects");
    // The damage must not be so mild that nothing is ever refused, nor so harsh that nothing
    // damaged is ever still valid JSON.
    let damaged = inputs - valid;
    assert!(
        accepted > 0 && accepted < damaged,
        "{accepted} of {damaged}"
    );
}

#[test]
fn lone_surrogates_agree_with_serde_json() {
    // In a value serde_json only checks the four hex digits; a key it decodes to a `str`.
    assert!(agree(r#"{"a":"\ud800","b":"\uDC00x"}"#));
    agree(r#"{"\ud800":1}"#);
    agree(r#"{"\ud800\u0041":1}"#);
}

#[test]
fn nesting_inside_a_value_is_not_limited_as_serde_json_does_not_limit_it() {
    for n in [127, 128, 129, 300] {
        let text = format!("{{\"v\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        assert!(agree(&text), "depth {n}");
    }
}

#[test]
fn refuses_what_json_refuses() {
    for text in [
        "",
        "{",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":1e}",
        "{\"a\":-}",
        "{\"a\":.5}",
        "{\"a\":+1}",
        "{\"a\":tru}",
        "{\"a\":\"\u{1}\"}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12\"}",
        "{\"a\":1}x",
        "{\"a\":1}\u{b}",
        "{\"a\":[1,]}",
        "{\"a\":{\"b\"}}",
        "[1]",
        "{\"a\":1}{}",
        "{a:1}",
        "{\"a\":NaN}",
    ] {
        assert!(!agree(text), "{text:?}");
    }
}

/// Every byte value at every position of runs around the SIMD step sizes: the run stops at
/// the first `"`, `\`, control byte or non-ASCII byte, on each implementation this host has.
#[test]
fn the_plain_run_stops_at_every_stop_byte_at_every_position() {
    use crate::core::simd::{plain_run, scalar, words};
    type Run = fn(&[u8]) -> usize;
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut runs: Vec<(&str, Run)> = vec![
        ("dispatch", plain_run),
        ("scalar", scalar),
        ("words", words),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE2 is part of x86_64; AVX2 only where the host has it.
        runs.push(("sse2", |b| unsafe { crate::core::simd::x86::sse2(b) }));
        if std::is_x86_feature_detected!("avx2") {
            runs.push(("avx2", |b| unsafe { crate::core::simd::x86::avx2(b) }));
        }
    }
    // Past 256 the AVX2 run steps 128 bytes at a time: every position, the edges of the set.
    let edges = [0x00, 0x1f, 0x20, b'"', b'\\', 0x7f, 0x80, 0xff];
    let lengths = (0..=40).chain([63, 64, 65, 95, 96, 97, 127, 128, 129, 200, 255, 256, 257]);
    let long = [383, 384, 385, 511, 512, 513, 700];
    for len in lengths.chain(long) {
        let values: Vec<u8> = if len > 257 {
            edges.to_vec()
        } else {
            (0..=255).collect()
        };
        let plain = vec![b'a'; len];
        for (name, run) in &runs {
            assert_eq!(run(&plain), len, "{name}: {len} plain bytes");
        }
        for pos in 0..len {
            for &c in &values {
                let mut b = plain.clone();
                if let Some(slot) = b.get_mut(pos) {
                    *slot = c;
                }
                let stop = c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c);
                let want = if stop { pos } else { len };
                for (name, run) in &runs {
                    assert_eq!(run(&b), want, "{name}: byte {c:#x} at {pos} of {len}");
                }
            }
        }
    }
}

/// Random runs of bytes at the edges of the stop set (and borrows between neighbours, which the
/// word-at-a-time test must not mistake for a stop): every implementation agrees with the
/// byte-at-a-time one.
#[test]
fn every_plain_run_implementation_agrees_on_random_runs() {
    use crate::core::simd::{plain_run, scalar, words};
    const EDGES: [u8; 16] = [
        0x00, 0x01, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xbf, 0xff, b'a',
        b'a',
    ];
    let mut rng = fastrand::Rng::with_seed(32);
    for _ in 0..40_000 {
        let len = rng.usize(0..150);
        // Mostly plain bytes, so runs reach past the SIMD steps.
        let b: Vec<u8> = (0..len)
            .map(|_| match rng.usize(0..24) {
                0..=3 => EDGES[rng.usize(..EDGES.len())],
                _ => rng.u8(0x23..0x5c),
            })
            .collect();
        let want = scalar(&b);
        assert_eq!(plain_run(&b), want, "{b:?}");
        assert_eq!(words(&b), want, "{b:?}");
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: SSE2 is part of x86_64; AVX2 only where the host has it.
            assert_eq!(unsafe { crate::core::simd::x86::sse2(&b) }, want, "{b:?}");
            if std::is_x86_feature_detected!("avx2") {
                assert_eq!(unsafe { crate::core::simd::x86::avx2(&b) }, want, "{b:?}");
            }
        }
    }
}

/// Multi-byte UTF-8 inside strings is accepted whole and refused when broken (a cut sequence,
/// a stray continuation byte, an overlong form, a surrogate), short and past a SIMD step.
#[test]
fn non_ascii_runs_are_validated_where_the_scan_stops_at_them() {
    let long = "x".repeat(70);
    for text in ["é", "€𝄞中文", "aé", "é a", &format!("{long}é{long}€")] {
        let body = format!(r#"{{"k":"{text}","model":"m"}}"#);
        assert!(agree(&body), "{body}");
        assert!(agree(format!(r#"{{"{text}":1}}"#)), "{text} as a key");
    }
    for bad in [
        &b"\xc3"[..],
        b"\x80",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xe2\x82",
    ] {
        for pad in [0, 70] {
            let mut body = br#"{"k":""#.to_vec();
            body.extend(std::iter::repeat_n(b'x', pad));
            body.extend_from_slice(bad);
            body.extend_from_slice(br#"x","model":"m"}"#);
            assert!(!agree(&body), "{bad:?} after {pad}");
        }
    }
}
