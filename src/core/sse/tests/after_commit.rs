//! Past the commit point ([`Watcher::skip_content`]) the watcher tells the same failures and
//! the same end at the same offsets as when it reads every event in full, on every stream of
//! these tests, their faults and their cuts; only content may become `Other`.

use super::*;

/// An event as reported, its end in the whole stream (`usize::MAX` for `finish`), and the
/// Responses id and sequence number a terminal event would continue after it.
type Traced = (Event, usize, Option<String>, Option<u64>);

/// Never skips content.
const FULL: usize = usize::MAX;

/// Feeds `chunks` in order, skipping content once `skip_after` events were reported.
fn trace(dialect: Dialect, chunks: &[&[u8]], skip_after: usize) -> Vec<Traced> {
    let mut watcher = Watcher::new(dialect);
    let mut traced = Vec::new();
    let mut base = 0;
    for chunk in chunks {
        let mut from = 0;
        for _ in 0..=chunk.len() {
            if traced.len() == skip_after {
                watcher.skip_content();
            }
            let Some((event, end)) = watcher.next(chunk, from) else {
                break;
            };
            traced.push(noted(&watcher, event, base + end));
            from = end;
        }
        base += chunk.len();
    }
    if traced.len() == skip_after {
        watcher.skip_content();
    }
    if let Some(event) = watcher.finish() {
        traced.push(noted(&watcher, event, FULL));
    }
    traced
}

fn noted(watcher: &Watcher, event: Event, end: usize) -> Traced {
    let id = watcher.response_id().map(str::to_string);
    (event, end, id, watcher.sequence_number())
}

/// What must not change: failures, the end and where they are. Content counts as `Other`,
/// and `Other` events need not come one by one past the commit point (a run of events told
/// without reading their data comes as one).
fn verdicts(traced: Vec<Traced>) -> Vec<Traced> {
    traced
        .into_iter()
        .filter(|(event, ..)| !matches!(event, Content | Other))
        .collect()
}

/// Asserts that skipping content from any event on changes no verdict of `stream`.
fn same_verdicts(dialect: Dialect, stream: &[u8]) {
    let full = trace(dialect, &[stream], FULL);
    let expected = verdicts(full.clone());
    let first_content = full.iter().position(|t| t.0 == Content);
    for skip_after in (0..=full.len()).chain(first_content.map(|i| i + 1)) {
        let skipping = verdicts(trace(dialect, &[stream], skip_after));
        let text = String::from_utf8_lossy(stream);
        assert_eq!(skipping, expected, "{dialect:?} from {skip_after}: {text}");
    }
}

/// The first `n` events of a stream whose events end in a blank line.
fn first(stream: &str, n: usize) -> String {
    stream.split_inclusive("\n\n").take(n).collect()
}

/// Every stream of these tests, and faults after content: provider errors, a line that is not
/// an event, data that is not JSON, Switchboard's own terminal event.
fn streams() -> Vec<(Dialect, String)> {
    let mut streams = corpus();
    streams.extend([
        (Dialect::ChatCompletions, CHAT_TOOLS.to_string()),
        (Dialect::Messages, MESSAGES.to_string()),
        (Dialect::Responses, RESPONSES.to_string()),
        (Dialect::Responses, RESPONSES_FAILED.to_string()),
        (
            Dialect::Completions,
            "data: {\"choices\":[{\"text\":\"Once\",\"index\":0}]}\n\ndata: [DONE]\n\n".into(),
        ),
    ]);
    let chat_content = first(CHAT, 2);
    for fault in CHAT_FAULTS {
        let stream = format!("{chat_content}{fault}\n\n{}", &CHAT[chat_content.len()..]);
        streams.push((Dialect::ChatCompletions, stream));
    }
    let messages_content = first(MESSAGES, 4);
    for fault in MESSAGES_FAULTS {
        streams.push((Dialect::Messages, format!("{messages_content}{fault}\n\n")));
    }
    let responses_content = first(RESPONSES, 5);
    for fault in RESPONSES_FAULTS {
        streams.push((
            Dialect::Responses,
            format!("{responses_content}{fault}\n\n"),
        ));
    }
    // A run whose last event gives no sequence number: the one before it is kept.
    let unnumbered = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n";
    for fault in RESPONSES_FAULTS {
        streams.push((
            Dialect::Responses,
            format!("{responses_content}{unnumbered}{unnumbered}{fault}\n\n"),
        ));
    }
    let incomplete = "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":9,\"response\":{\"id\":\"resp_1\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}\n\n";
    streams.push((Dialect::Responses, incomplete.to_string()));
    for (dialect, content) in [
        (Dialect::ChatCompletions, chat_content),
        (Dialect::Messages, messages_content),
        (Dialect::Responses, responses_content),
    ] {
        let mut watcher = Watcher::new(dialect);
        let _ = watcher.next(content.as_bytes(), 0);
        let terminal = watcher.terminal_event("cut", "stream_reset");
        let terminal = String::from_utf8(terminal).unwrap();
        streams.push((dialect, format!("{content}{terminal}")));
    }
    streams
}

/// Events after a chat stream's first token.
const CHAT_FAULTS: [&str; 11] = [
    r#"data: {"error":{"message":"boom","type":"server_error","param":null,"code":null}}"#,
    "data: {\"choices\":[]}\ndata: {\"error\":{\"message\":\"joined\"}}",
    "data: {\"choices\":[]}\rnot an event",
    r#"data: {"error":{"object":"error","message":"too long","code":400}}"#,
    r#"data: {"error":"upstream timed out"}"#,
    "event: error\ndata: {\"message\":\"overloaded\",\"code\":\"busy\"}",
    "data: {\"error\":null,\"choices\":[{\"delta\":{\"content\":\"x\"}}]}",
    "data: {\"choices\":[{\"delta\":{\"content\":\"an \\\"error\\\"\"}}]}",
    "this is not an event",
    "data: <html>",
    "data: [DONE] now",
];

/// Events after a Messages stream's first delta.
const MESSAGES_FAULTS: [&str; 7] = [
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
    // A raw carriage return ends a line: the rest of the data is a line of its own.
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":\"a\rb\"}",
    "event: content_\rblock_delta\ndata: {\"type\":\"content_block_delta\"}",
    "event: error",
    "event: ping\ndata: not json",
    "this is not an event",
    "data: {\"type\":\"message_stop\"}",
];

/// Events after a Responses stream's first delta.
const RESPONSES_FAULTS: [&str; 11] = [
    "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\rb\"}",
    "event: response.output\r_text.delta\ndata: {\"type\":\"response.output_text.delta\"}",
    "event: error\ndata: {\"type\":\"error\",\"sequence_number\":5,\"error\":{\"type\":\"server_error\",\"code\":\"server_error\",\"message\":\"An error occurred.\",\"param\":null}}",
    "event: error\ndata: {\"type\":\"error\",\"code\":\"ERR\",\"message\":\"wrong\",\"param\":null,\"sequence_number\":5}",
    "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":5,\"response\":{\"id\":\"resp_67c\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}",
    "event: response.failed\ndata: {\"type\":\"response.failed\", \"sequence_number\" : 5,\"response\":{\"id\":\"resp_67c\",\"error\":{\"code\":\"server_error\",\"message\":\"m\"}}}",
    "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"no number\"}",
    "event: response.output_text.delta\ndata: {\"sequence_number\":5.5,\"type\":\"response.output_text.delta\"}",
    "event: keepalive\ndata: {\"type\":\"keepalive\",\"sequence_number\":6}",
    "this is not an event",
    "data: {\"type\":\"response.completed\",\"sequence_number\":7}",
];

#[test]
fn skipping_content_changes_no_failure_end_or_offset() {
    for (dialect, stream) in streams() {
        same_verdicts(dialect, stream.as_bytes());
    }
}

#[test]
fn skipping_content_changes_no_verdict_of_a_stream_cut_at_any_byte() {
    for (dialect, stream) in [
        (Dialect::ChatCompletions, CHAT),
        (Dialect::ChatCompletions, CHAT_TOOLS),
        (Dialect::Messages, MESSAGES),
        (Dialect::Responses, RESPONSES),
    ] {
        let bytes = stream.as_bytes();
        for cut in 0..=bytes.len() {
            let head = &bytes[..cut];
            let full = trace(dialect, &[head], FULL);
            let first_content = full.iter().position(|t| t.0 == Content);
            for skip_after in [Some(0), first_content.map(|i| i + 1)]
                .into_iter()
                .flatten()
            {
                let skipping = trace(dialect, &[head], skip_after);
                assert_eq!(
                    verdicts(skipping),
                    verdicts(full.clone()),
                    "{dialect:?} cut at {cut}, from {skip_after}"
                );
            }
        }
    }
}

#[test]
fn skipping_content_does_not_depend_on_the_chunking() {
    for (dialect, stream) in streams() {
        let bytes = stream.as_bytes();
        let whole = trace(dialect, &[bytes], 0);
        let every: Vec<usize> = (1..bytes.len()).collect();
        let by_byte = trace(dialect, &split(bytes, &every), 0);
        // Whole, a run of events told without reading their data comes as one; cut at every
        // byte, none is whole in its chunk.
        let events = |t: &[Traced]| -> Vec<(Event, usize)> {
            let told = verdicts(t.to_vec());
            told.into_iter().map(|(e, end, ..)| (e, end)).collect()
        };
        // Ends at `usize::MAX` (`finish`) are past any `\r`.
        assert_eq!(
            past_crlf(bytes, &events(&by_byte)),
            events(&whole),
            "{dialect:?}: {stream}"
        );
    }
}

#[test]
fn past_the_commit_point_a_broken_json_object_is_other_until_the_stream_ends() {
    let broken = "data: {\"choices\":[{\"delta\":\n\n";
    // The stream's first line is read by the framing (it may start with a byte order mark);
    // the second and third events, whole in their chunk, come as one.
    let twice = format!("{broken}{broken}");
    let stream = format!("{broken}{twice}data: [DONE]\n\n");
    let skipping = trace(Dialect::ChatCompletions, &[stream.as_bytes()], 0);
    assert_eq!(
        skipping
            .iter()
            .map(|t| (t.0.clone(), t.1))
            .collect::<Vec<_>>(),
        [
            (Other, broken.len()),
            (Other, broken.len() * 3),
            (Final, stream.len())
        ]
    );
    // Split after its `data:`, it is read line by line and told `Other`.
    let at = broken.len() + 6;
    let (head, rest) = stream.as_bytes().split_at(at);
    let split = trace(Dialect::ChatCompletions, &[head, rest], 0);
    assert_eq!(
        split.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
        [Other, Other, Other, Final]
    );
    // Cut there, the stream's last event is still read in full.
    let cut = trace(Dialect::ChatCompletions, &[&broken.as_bytes()[..25]], 0);
    assert_eq!(
        cut.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
        [Malformed]
    );
}

#[test]
fn past_the_commit_point_the_sequence_number_is_read_from_the_bytes() {
    let event = |data: &str| format!("event: response.output_text.delta\ndata: {data}\n\n");
    let cases = [
        ("{\"type\":\"x\",\"sequence_number\":12}", Some(12)),
        ("{\"sequence_number\" :\t7 ,\"type\":\"x\"}", Some(7)),
        (
            "{\"delta\":\"\\\"sequence_number\\\":3\",\"sequence_number\":4}",
            Some(4),
        ),
        ("{\"sequence_number\":-1}", None),
        ("{\"sequence_number\":1e3}", None),
        ("{\"sequence_number\":\"5\"}", None),
        ("{\"sequence_number\":99999999999999999999999}", None),
    ];
    for (data, expected) in cases {
        let stream = event(data);
        let skipping = trace(Dialect::Responses, &[stream.as_bytes()], 0);
        let full = trace(Dialect::Responses, &[stream.as_bytes()], FULL);
        assert_eq!(skipping[0].3, expected, "{data}");
        assert_eq!(full[0].3, expected, "{data}");
    }
}
