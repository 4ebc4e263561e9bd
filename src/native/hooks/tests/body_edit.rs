//! The router's attempt's body edit, written over the fake Envoy's body slices: the bytes the
//! router then sends on, and which of Envoy's appends and drains the module asked for.

use super::*;

/// A request of `config` whose body came as `buffered` then `received`, lent in slices of
/// `slice` bytes, routed: the body Envoy then holds, and the appends and drains made.
fn routed(
    config: &str,
    headers: &[(&str, &str)],
    body: (&[u8], &[u8]),
    slice: usize,
) -> (Vec<u8>, Vec<Call>) {
    routed_lending(config, headers, body, slice, None)
}

/// [`routed`], with Envoy lending a body's slices only `lends` times.
fn routed_lending(
    config: &str,
    headers: &[(&str, &str)],
    (buffered, received): (&[u8], &[u8]),
    slice: usize,
    lends: Option<usize>,
) -> (Vec<u8>, Vec<Call>) {
    let module = new_stream_of(config, headers, "");
    FAKE.with(|f| {
        let mut f = f.borrow_mut();
        f.buffered = buffered.to_vec();
        f.body = received.to_vec();
        f.slice = slice;
        f.lends = lends;
    });
    assert_eq!(request_headers(module), status::STOP_ITERATION);
    let verdict =
        envoy_dynamic_module_on_http_filter_request_body(std::ptr::null_mut(), module, true);
    let calls = take_calls();
    assert_eq!(verdict, status::CONTINUE, "the request goes on: {calls:?}");
    envoy_dynamic_module_on_http_filter_destroy(module);
    let edits = calls
        .into_iter()
        .filter(|c| matches!(c, Call::Append(..) | Call::Drain(..)))
        .collect();
    let sent = FAKE.with(|f| {
        let f = f.borrow();
        [f.buffered.as_slice(), f.body.as_slice()].concat()
    });
    (sent, edits)
}

fn json_chat() -> Vec<(&'static str, &'static str)> {
    chat(&[
        (":authority", "gateway"),
        ("content-type", "application/json"),
    ])
}

#[test]
fn a_shorter_model_name_is_written_over_envoys_slices_with_no_append_or_drain() {
    let body = r#"{"messages":[{"role":"user","content":"hello there"}],"model":"vm"}"#;
    let (sent, edits) = routed(CONFIG, &json_chat(), body.as_bytes().split_at(20), 7);
    assert_eq!(edits, []);
    assert_eq!(sent, body.replace(r#""vm""#, r#""m" "#).into_bytes());
}

#[test]
fn a_longer_model_name_first_in_the_body_moves_every_byte_after_it_across_both_buffers() {
    let config = CONFIG.replace(r#""model": "m""#, r#""model": "a-much-longer-model-name""#);
    let body = r#"{"model":"vm","messages":[{"role":"user","content":"hello there, general"}]}"#;
    let (sent, edits) = routed(&config, &json_chat(), body.as_bytes().split_at(30), 5);
    let grow = "a-much-longer-model-name".len() - "vm".len();
    assert_eq!(edits, [Call::Append(body::RECEIVED_REQUEST, grow)]);
    let expected = body.replace(r#""vm""#, r#""a-much-longer-model-name""#);
    assert_eq!(sent, expected.into_bytes());
}

#[test]
fn a_multipart_body_that_shrinks_is_drained_from_the_buffer_then_from_the_chunk() {
    let virtual_model = "team/a-rather-long-virtual-model-name";
    let config = format!(
        r#"{{"models": [{{"name": "w", "cluster": "c", "model": "m"}}],
          "virtual_models": [{{"name": "{virtual_model}", "model_types": ["audio_transcription"],
            "routing_config": {{"type": "weight-based-routing",
              "load_balance_targets": [{{"target": "w", "weight": 100}}]}}}}]}}"#
    );
    let headers = [
        (":method", "POST"),
        (":path", "/v1/audio/transcriptions"),
        (":authority", "gateway"),
        ("content-type", "multipart/form-data; boundary=XyZ"),
    ];
    let body = format!(
        "--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{virtual_model}\r\n\
         --XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\
         Content-Type: audio/wav\r\n\r\nRIFF--\r\n- --XyZ\r\n--XyZ--\r\n"
    );
    let shrink = virtual_model.len() - "m".len();
    // The buffer holds fewer bytes than the body loses: the rest comes off the chunk.
    let (sent, edits) = routed(&config, &headers, body.as_bytes().split_at(10), 3);
    assert_eq!(
        edits,
        [
            Call::Drain(body::BUFFERED_REQUEST, 10),
            Call::Drain(body::RECEIVED_REQUEST, shrink - 10)
        ]
    );
    assert_eq!(sent, body.replace(virtual_model, "m").into_bytes());
}

#[test]
fn when_envoy_refuses_to_lend_the_slices_the_body_is_replaced_whole() {
    let config = CONFIG.replace(r#""model": "m""#, r#""model": "a-much-longer-model-name""#);
    let body = r#"{"model":"vm","messages":[{"role":"user","content":"hello there, general"}]}"#;
    // Lent once, to be read; refused when the edit asks again.
    let (sent, edits) = routed_lending(
        &config,
        &json_chat(),
        ("".as_bytes(), body.as_bytes()),
        0,
        Some(1),
    );
    let expected = body.replace(r#""vm""#, r#""a-much-longer-model-name""#);
    // The room the in-place edit asked for first is drained with the rest, then the edited
    // body goes back in parts borrowed from the client's (the bytes before the edit, the new
    // name, the bytes after it).
    let grow = "a-much-longer-model-name".len() - "vm".len();
    let (first, rest) = edits.split_at(2);
    assert_eq!(
        first,
        [
            Call::Append(body::RECEIVED_REQUEST, grow),
            Call::Drain(body::RECEIVED_REQUEST, body.len() + grow),
        ]
    );
    let appended: Vec<usize> = rest
        .iter()
        .map(|c| match c {
            Call::Append(body::RECEIVED_REQUEST, n) => *n,
            other => panic!("not an append to the chunk: {other:?}"),
        })
        .collect();
    assert_eq!(appended.iter().sum::<usize>(), expected.len(), "{edits:?}");
    assert_eq!(sent, expected.into_bytes());
}
