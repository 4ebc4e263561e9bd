use super::*;
use crate::core::request::Edit;

/// `body` as `cuts` splits it (grown by `grow` filler bytes), edited in place; the buffer's
/// bytes afterwards.
fn in_place(body: &[u8], edits: &Edits, cuts: &[usize]) -> Option<Vec<u8>> {
    let r = resize(edits, body.len());
    let mut buffer = body.to_vec();
    buffer.resize(body.len() + r.grow, b'#');
    let mut rest = buffer.as_mut_slice();
    let mut parts = Vec::new();
    let mut at = 0;
    for &cut in cuts {
        let (part, tail) = std::mem::take(&mut rest).split_at_mut(cut - at);
        parts.push(part);
        rest = tail;
        at = cut;
    }
    parts.push(rest);
    apply(edits, body.len(), &mut parts).then(|| buffer.get(r.shrink..).unwrap().to_vec())
}

fn edit(span: Range<usize>, with: &[u8]) -> Edit {
    Edit {
        span,
        with: with.to_vec(),
    }
}

#[test]
fn an_edit_of_the_same_length_writes_only_its_bytes() {
    let body = br#"{"messages":[{"role":"user","content":"hi"}],"model":"vm/chat"}"#;
    let at = body.len() - 9;
    let edits = Edits::new(vec![edit(at..at + 7, b"gpt-4o ")], body.len()).unwrap();
    assert_eq!(resize(&edits, body.len()), Resize { grow: 0, shrink: 0 });
    let out = in_place(body, &edits, &[5, 20, 40]).unwrap();
    assert_eq!(out, edits.apply(body).unwrap());
    assert!(out.ends_with(br#""model":"gpt-4o "}"#));
}

#[test]
fn a_longer_model_grows_the_buffer_and_moves_only_what_follows() {
    let body = br#"{"messages":[],"model":"a"}"#;
    let at = body.len() - 3;
    let edits = Edits::new(vec![edit(at..at + 1, b"a-much-longer-name")], body.len()).unwrap();
    assert_eq!(resize(&edits, body.len()).grow, 17);
    for cut in 0..=body.len() + 17 {
        assert_eq!(
            in_place(body, &edits, &[cut]).unwrap(),
            edits.apply(body).unwrap(),
            "cut at {cut}"
        );
    }
}

#[test]
fn a_shorter_body_ends_where_the_buffer_ends_for_the_host_to_drain_its_front() {
    let body = b"--abc--xyz--";
    let edits = Edits::new(vec![edit(2..5, b"A"), edit(7..10, b"")], body.len()).unwrap();
    assert_eq!(resize(&edits, body.len()), Resize { grow: 0, shrink: 5 });
    assert_eq!(in_place(body, &edits, &[1, 6, 7]).unwrap(), b"--A----");
}

#[test]
fn buffers_of_the_wrong_size_or_edits_past_the_body_are_refused_untouched() {
    let body = b"0123456789".to_vec();
    let edits = Edits::new(vec![edit(2..4, b"abc")], body.len()).unwrap();
    let mut buffer = body.clone();
    assert!(
        !apply(&edits, body.len(), &mut [buffer.as_mut_slice()]),
        "no room to grow"
    );
    assert_eq!(buffer, body);
    let late = Edits::new(vec![edit(8..10, b"xy")], 10).unwrap();
    let mut short = b"01234567".to_vec();
    assert!(
        !apply(&late, 8, &mut [short.as_mut_slice()]),
        "the edit is past the body"
    );
    assert_eq!(short, b"01234567");
}

/// Random bodies, edits and slice cuts: the in-place edit agrees with [`Edits::apply`].
#[test]
fn in_place_agrees_with_a_fresh_copy_on_random_edits_and_slices() {
    let mut rng = fastrand::Rng::with_seed(31);
    for round in 0..20_000 {
        let len = rng.usize(0..120);
        let body: Vec<u8> = (0..len).map(|_| rng.u8(b'a'..=b'z')).collect();
        let mut edits = Vec::new();
        let mut at = 0;
        while at <= len && rng.u8(0..4) > 0 {
            let start = rng.usize(at..=len);
            let end = rng.usize(start..=len.min(start + 30));
            let with: Vec<u8> = (0..rng.usize(0..40)).map(|_| rng.u8(b'A'..=b'Z')).collect();
            edits.push(edit(start..end, &with));
            // The next may touch this one, or insert at the same place.
            at = end;
        }
        let edits = Edits::new(edits, len).unwrap();
        let room = len + resize(&edits, len).grow;
        let mut cuts: Vec<usize> = (0..rng.usize(0..6)).map(|_| rng.usize(0..=room)).collect();
        cuts.sort_unstable();
        assert_eq!(
            in_place(&body, &edits, &cuts),
            edits.apply(&body),
            "round {round}: {edits:?} cut at {cuts:?}"
        );
    }
}
