//! A request that streams, against the fake Envoy: every attempt is a streamed call-out whose
//! answer the module forwards to the client itself.

use super::*;

/// Targets `t-<test>` (cluster `c`) then `u-<test>` (cluster `d`): each test names its own,
/// since the health of a target is shared by every stream of the process.
fn streams_config(test: &str) -> String {
    r#"{"models": [
        {"name": "t-TEST", "cluster": "c", "model": "m", "authority": "t.example"},
        {"name": "u-TEST", "cluster": "d", "model": "n", "authority": "u.example"}],
      "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
        "type": "priority-based-routing", "load_balance_targets": [
          {"target": "t-TEST", "priority": 0}, {"target": "u-TEST", "priority": 1}]}}]}"#
        .replace("TEST", test)
}

const STREAMED_CHAT: &str =
    r#"{"model":"vm","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// A streamed chat request of `test`'s config, its headers arrived: the module's pointer.
fn streamed_headers(test: &str) -> *const c_void {
    let headers = chat(&[
        (":authority", "gateway"),
        ("content-type", "application/json"),
    ]);
    new_stream_of(&streams_config(test), &headers, STREAMED_CHAT)
}

/// A streamed chat request whose headers and whole body arrived: the module's pointer.
fn streamed_request(test: &str) -> *const c_void {
    let module = streamed_headers(test);
    assert_eq!(request_headers(module), status::STOP_ITERATION);
    let body = envoy_dynamic_module_on_http_filter_request_body(std::ptr::null_mut(), module, true);
    assert_eq!(body, status::STOP_ITERATION, "the request stays stopped");
    module
}

/// The calls that make or answer attempts (header reads left out).
fn attempts() -> Vec<Call> {
    take_calls()
        .into_iter()
        .filter(|c| {
            !matches!(
                c,
                Call::Lookup(_) | Call::Remove(_) | Call::ReadHeaders | Call::ClearRoute
            )
        })
        .collect()
}

fn headers(module: *const c_void, id: u64, status: &str, end: bool) {
    stream_headers(std::ptr::null_mut(), module, id, status, end);
}

fn data(module: *const c_void, id: u64, bytes: &str, end: bool) {
    let chunk = [EnvoyBuffer {
        ptr: bytes.as_ptr(),
        len: bytes.len(),
    }];
    envoy_dynamic_module_on_http_filter_http_stream_data(
        std::ptr::null_mut(),
        module,
        id,
        chunk.as_ptr(),
        chunk.len(),
        end,
    );
}

fn complete(module: *const c_void, id: u64) {
    envoy_dynamic_module_on_http_filter_http_stream_complete(std::ptr::null_mut(), module, id);
}

/// What the client got, in order.
#[derive(Default)]
struct ToClient<'c> {
    /// Each headers call's headers.
    headers: Vec<&'c [(String, String)]>,
    /// Every byte sent.
    bytes: String,
    /// Whether each send ended the answer.
    ends: Vec<bool>,
}

fn to_client(calls: &[Call]) -> ToClient<'_> {
    let mut got = ToClient::default();
    for call in calls {
        match call {
            Call::SendHeaders(h, end) => {
                assert!(got.bytes.is_empty(), "headers after bytes: {calls:?}");
                got.headers.push(h);
                got.ends.push(*end);
            }
            Call::SendData(d, end) => {
                got.bytes.push_str(d);
                got.ends.push(*end);
            }
            _ => {}
        }
    }
    got
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn the_first_attempt_is_a_module_stream_and_the_request_never_goes_on() {
    let module = streamed_request("first");
    let calls = attempts();
    assert_eq!(calls, [Call::StartStream("c".into())], "{calls:?}");
    envoy_dynamic_module_on_http_filter_destroy(module);
}

#[test]
fn a_503_falls_back_to_a_stream_whose_answer_reaches_the_client_with_headers_once() {
    let module = streamed_request("fallback");
    attempts();
    // The first target is down: the next attempt starts, the abandoned one is reset.
    headers(module, 1, "503", false);
    assert_eq!(
        attempts(),
        [Call::StartStream("d".into()), Call::ResetStream(1)]
    );
    // A late chunk of the abandoned answer goes nowhere.
    data(module, 1, "down", true);
    assert_eq!(attempts(), []);
    headers(module, 2, "200", false);
    let chunks = [
        "data: {\"a\":1}\n\n",
        "data: {\"b\":2}\n\n",
        "data: [DONE]\n\n",
    ];
    let mut calls = attempts();
    for (i, chunk) in chunks.iter().enumerate() {
        data(module, 2, chunk, i == chunks.len() - 1);
        calls.extend(attempts());
    }
    complete(module, 2);
    calls.extend(attempts());
    let ToClient {
        headers: sent,
        bytes,
        ends,
    } = to_client(&calls);
    assert_eq!(sent.len(), 1, "{calls:?}");
    assert_eq!(header(sent[0], ":status"), Some("200"));
    assert_eq!(
        header(sent[0], "x-switchboard-resolved-model"),
        Some("u-fallback")
    );
    assert_eq!(bytes, chunks.concat());
    // Only the last send ends the client's answer.
    assert_eq!(ends.last(), Some(&true));
    assert!(ends[..ends.len() - 1].iter().all(|e| !e), "{calls:?}");
    // The module's own sends pass its response hooks untouched.
    assert!(calls.contains(&Call::ReplyPassed(status::CONTINUE)));
    assert!(!calls.contains(&Call::ContinueRequest));
    envoy_dynamic_module_on_http_filter_destroy(module);
}

#[test]
fn an_answer_let_through_at_its_headers_goes_to_the_client_chunk_by_chunk() {
    let module = streamed_request("as-it-comes");
    attempts();
    headers(module, 1, "503", false);
    attempts();
    // The fallback answers with a client error: delivered as it is, as it comes.
    headers(module, 2, "400", false);
    let calls = attempts();
    assert!(
        matches!(&calls[..], [Call::SendHeaders(h, false), Call::ReplyPassed(0)]
            if header(h, ":status") == Some("400")),
        "{calls:?}"
    );
    data(module, 2, "{\"error\":", false);
    assert_eq!(attempts(), [Call::SendData("{\"error\":".into(), false)]);
    data(module, 2, "{}}", true);
    assert_eq!(attempts(), [Call::SendData("{}}".into(), true)]);
    complete(module, 2);
    assert_eq!(attempts(), []);
    envoy_dynamic_module_on_http_filter_destroy(module);
}

#[test]
fn an_answer_envoy_makes_before_starting_returns_still_reaches_the_machine() {
    let module = streamed_headers("inline");
    request_headers(module);
    // No healthy host for the first target: Envoy answers 503 inside the start call.
    FAKE.with(|f| f.borrow_mut().answer_at_start = true);
    envoy_dynamic_module_on_http_filter_request_body(std::ptr::null_mut(), module, true);
    let calls = attempts();
    assert_eq!(
        calls,
        [Call::StartStream("c".into()), Call::StartStream("d".into())],
        "the 503 made while the filter was busy is run once it is free"
    );
    envoy_dynamic_module_on_http_filter_destroy(module);
}

#[test]
fn a_client_that_hangs_up_has_its_stream_reset_and_the_reset_counts_for_nothing() {
    let module = streamed_request("hang-up");
    attempts();
    // A good answer, held until its first content.
    headers(module, 1, "200", false);
    assert_eq!(attempts(), []);
    // The client goes away: Envoy completes its stream, then destroys the filter.
    envoy_dynamic_module_on_http_filter_stream_complete(std::ptr::null_mut(), module);
    // The reset's own event (and Envoy's, were it to reset the call-out again) reaches no
    // machine: a reset held answer would otherwise fall back to the next target.
    assert_eq!(attempts(), [Call::ResetStream(1)]);
    envoy_dynamic_module_on_http_filter_http_stream_reset(std::ptr::null_mut(), module, 1, 0);
    assert_eq!(attempts(), []);
    envoy_dynamic_module_on_http_filter_destroy(module);
}

#[test]
fn a_reset_of_the_stream_in_flight_is_a_failed_attempt() {
    let module = streamed_request("reset");
    attempts();
    headers(module, 1, "200", false);
    envoy_dynamic_module_on_http_filter_http_stream_reset(std::ptr::null_mut(), module, 1, 0);
    assert_eq!(attempts(), [Call::StartStream("d".into())]);
    envoy_dynamic_module_on_http_filter_destroy(module);
}
