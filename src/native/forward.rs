//! The answer of a streamed call-out as the module holds it and forwards it to the client.
//!
//! A request that streams never reaches Envoy's router: each of its attempts is a streamed
//! call-out ([`crate::core::stream::Host::start_stream`]) whose answer the module sends on
//! itself. What Envoy's response would otherwise hold lives here: the answer's status and
//! headers, the bytes not yet sent, and what the client already got. Sends are queued as
//! [`After`] calls, made once the hook has let go of the filter (they run its response hooks).

use super::after::After;
use crate::core::flight::Chunk;
use crate::core::headers::Headers;

/// Answer headers not passed on: they frame the upstream connection, and Envoy frames the
/// client's answer itself.
const HOP_BY_HOP: &[&[u8]] = &[
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// One event of a streamed call-out, its bytes copied out of Envoy's hook (it may be run
/// after the hook, when it came while the filter was in use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// The answer's headers (`end`: no body follows).
    Headers {
        id: u64,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        end: bool,
    },
    /// A chunk of its body (`end`: the last).
    Data { id: u64, bytes: Vec<u8>, end: bool },
    /// Its trailers: the answer ended.
    Trailers { id: u64 },
    /// The call-out finished (after its last event).
    Complete { id: u64 },
    /// The call-out was reset or failed before its end.
    Reset { id: u64 },
}

impl StreamEvent {
    /// The streamed call-out it belongs to.
    pub fn id(&self) -> u64 {
        match self {
            StreamEvent::Headers { id, .. }
            | StreamEvent::Data { id, .. }
            | StreamEvent::Trailers { id }
            | StreamEvent::Complete { id }
            | StreamEvent::Reset { id } => *id,
        }
    }
}

/// The streamed call-out in flight, its answer as held so far, and what the client got.
#[derive(Debug, Default)]
pub struct Held {
    /// Every attempt of this request is a streamed call-out: Envoy's own response hooks only
    /// see what the module sends.
    pub forwards: bool,
    /// The call-out whose answer this is, until it finishes or is abandoned.
    stream: Option<u64>,
    /// Its answer ended (its last chunk or trailers came): nothing is left to reset.
    answer_ended: bool,
    /// Its headers, `:status` among them.
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// Its bytes not yet sent to the client, lent to the machine while it reads them
    /// ([`Chunk`]); its only owner again by the time they are sent.
    body: Chunk,
    /// The client has the answer's headers.
    headers_sent: bool,
    /// The client's answer ended (or Switchboard replied): nothing more goes to it.
    ended: bool,
}

impl Held {
    /// Whether events of call-out `id` are the held answer's.
    pub fn is_current(&self, id: u64) -> bool {
        self.stream == Some(id)
    }

    /// Call-out `id` started: its answer replaces whatever was held of the one before.
    pub fn start(&mut self, id: u64) {
        self.forwards = true;
        self.stream = Some(id);
        self.answer_ended = false;
        self.headers.clear();
        self.body = Chunk::default();
    }

    /// Lets go of the call-out in flight (a new attempt, a reply, the client went away); its
    /// id if it is still running and must be reset. Its later events are ignored.
    pub fn abandon(&mut self) -> Option<u64> {
        let running = self.stream.take().filter(|_| !self.answer_ended);
        self.headers.clear();
        self.body = Chunk::default();
        running
    }

    /// The call-out finished or was reset: nothing of it is left to reset.
    pub fn gone(&mut self) {
        self.stream = None;
    }

    /// The client's answer is over (Switchboard replied, or the client's stream ended):
    /// nothing more is sent to it.
    pub fn client_done(&mut self) {
        self.ended = true;
    }

    /// The answer's headers arrived.
    pub fn on_headers(&mut self, headers: Vec<(Vec<u8>, Vec<u8>)>, end: bool) {
        self.headers = headers;
        self.answer_ended = end;
    }

    /// A chunk of the answer arrived: held after what is not yet sent.
    pub fn on_data(&mut self, bytes: Vec<u8>, end: bool) {
        if self.body.is_empty() {
            self.body = Chunk::new(bytes);
        } else {
            Chunk::make_mut(&mut self.body).extend_from_slice(&bytes);
        }
        self.answer_ended |= end;
    }

    /// The answer's trailers arrived.
    pub fn on_trailers(&mut self) {
        self.answer_ended = true;
    }

    /// The answer's `:status` (502 if it has none).
    pub fn status(&self) -> u16 {
        self.header(b":status")
            .and_then(|v| crate::core::text::utf8(v)?.parse::<u16>().ok())
            .unwrap_or(502)
    }

    /// The first value of header `name`.
    fn header(&self, name: &[u8]) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Every header of the answer.
    pub fn headers(&self) -> Headers {
        Headers::from_pairs(self.headers.iter().map(|(k, v)| (k, v)))
    }

    /// Every byte of the answer held and not yet sent.
    pub fn body(&self) -> Chunk {
        Chunk::clone(&self.body)
    }

    /// Sets a header of the answer, replacing its values.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.remove_header(name);
        self.headers
            .push((name.as_bytes().to_vec(), value.as_bytes().to_vec()));
    }

    /// Removes a header of the answer.
    pub fn remove_header(&mut self, name: &str) {
        self.headers.retain(|(k, _)| k != name.as_bytes());
    }

    /// Replaces the bytes held with `with`.
    pub fn replace_body(&mut self, with: Vec<u8>) {
        self.body = Chunk::new(with);
    }

    /// The bytes held, taken to be sent: not copied once the machine let go of them.
    fn take_body(&mut self) -> Vec<u8> {
        Chunk::unwrap_or_clone(std::mem::take(&mut self.body))
    }

    /// Queues what is held for the client: the headers the first time, then the bytes, which
    /// are let go of (memory does not grow with the answer); `end`: the answer ended here.
    pub fn flush(&mut self, end: bool, after: &mut Vec<After>) {
        if self.ended {
            self.body = Chunk::default();
            return;
        }
        if !self.headers_sent {
            let only_headers = end && self.body.is_empty();
            self.send_headers(only_headers, after);
            if only_headers {
                self.ended = true;
                return;
            }
        }
        if !self.body.is_empty() || end {
            after.push(After::SendData {
                data: self.take_body(),
                end,
            });
        }
        self.ended |= end;
    }

    /// Ends the client's answer now with what is held and `tail` (its headers first if they
    /// never went), after resetting the call-out in flight.
    pub fn end_now(&mut self, tail: &[u8], after: &mut Vec<After>) {
        if self.ended {
            return;
        }
        // Reset first: the reset's own event then finds the call-out forgotten.
        if let Some(id) = self.stream.take().filter(|_| !self.answer_ended) {
            after.push(After::ResetStream(id));
        }
        let mut data = self.take_body();
        data.extend_from_slice(tail);
        if !self.headers_sent {
            self.send_headers(false, after);
        }
        after.push(After::SendData { data, end: true });
        self.ended = true;
    }

    /// The call-out ended with the client's answer still open (its headers sent, no end):
    /// the client's answer ends there too.
    pub fn close(&mut self, after: &mut Vec<After>) {
        if self.headers_sent && !self.ended {
            self.flush(true, after);
        }
    }

    /// Queues the answer's headers, without those framing the upstream connection.
    fn send_headers(&mut self, end: bool, after: &mut Vec<After>) {
        let headers = self
            .headers
            .iter()
            .filter(|(k, _)| !HOP_BY_HOP.contains(&k.as_slice()))
            .cloned()
            .collect();
        after.push(After::SendHeaders { headers, end });
        self.headers_sent = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        list.iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn sent(after: &[After]) -> Vec<String> {
        after
            .iter()
            .map(|a| match a {
                After::SendHeaders { headers, end } => {
                    let names: Vec<_> = headers
                        .iter()
                        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                        .collect();
                    format!("headers {} end={end}", names.join(","))
                }
                After::SendData { data, end } => {
                    format!("data {} end={end}", String::from_utf8_lossy(data))
                }
                After::ResetStream(id) => format!("reset {id}"),
                _ => "other".to_string(),
            })
            .collect()
    }

    #[test]
    fn bytes_lent_to_the_machine_go_to_the_client_without_a_copy_once_it_let_go() {
        let mut held = Held::default();
        held.start(7);
        held.on_headers(pairs(&[(":status", "200")]), false);
        let bytes = b"data: {}\n\n".to_vec();
        let at = bytes.as_ptr();
        held.on_data(bytes, false);
        let lent = held.body();
        assert_eq!(lent.as_ptr(), at, "lent, not copied");
        drop(lent);
        let mut after = Vec::new();
        held.flush(false, &mut after);
        let Some(After::SendData { data, .. }) = after.last() else {
            panic!("nothing sent");
        };
        assert_eq!((data.as_slice(), data.as_ptr()), (&b"data: {}\n\n"[..], at));
        // Still lent when sent (no machine keeps it so, but it is not lost): a copy goes.
        held.on_data(b"x".to_vec(), false);
        let lent = held.body();
        held.flush(false, &mut after);
        assert!(matches!(after.last(), Some(After::SendData { data, .. }) if data == b"x"));
        assert_eq!(lent.as_slice(), b"x");
    }

    #[test]
    fn headers_go_once_then_each_flush_sends_and_drops_what_is_held() {
        let mut held = Held::default();
        held.start(7);
        let headers = pairs(&[(":status", "200"), ("transfer-encoding", "chunked")]);
        held.on_headers(headers, false);
        assert_eq!(held.status(), 200);
        let mut after = Vec::new();
        held.flush(false, &mut after);
        held.on_data(b"a".to_vec(), false);
        held.on_data(b"b".to_vec(), false);
        assert_eq!(held.body().as_slice(), b"ab");
        held.flush(false, &mut after);
        assert!(held.body().is_empty());
        held.on_data(b"c".to_vec(), true);
        held.flush(true, &mut after);
        // Nothing after the end.
        held.close(&mut after);
        held.flush(true, &mut after);
        assert_eq!(
            sent(&after),
            [
                "headers :status end=false",
                "data ab end=false",
                "data c end=true"
            ]
        );
    }

    #[test]
    fn an_answer_of_headers_only_ends_with_them() {
        let mut held = Held::default();
        held.start(1);
        held.on_headers(pairs(&[(":status", "204")]), true);
        let mut after = Vec::new();
        held.flush(true, &mut after);
        assert_eq!(sent(&after), ["headers :status end=true"]);
        // Its call-out ended: abandoning it resets nothing.
        assert_eq!(held.abandon(), None);
    }

    #[test]
    fn ending_now_resets_a_running_call_out_then_sends_what_is_held_and_the_tail() {
        let mut held = Held::default();
        held.start(3);
        held.on_headers(pairs(&[(":status", "200")]), false);
        held.on_data(b"part".to_vec(), false);
        let mut after = Vec::new();
        held.end_now(b"|tail", &mut after);
        assert_eq!(
            sent(&after),
            [
                "reset 3",
                "headers :status end=false",
                "data part|tail end=true"
            ]
        );
        assert!(!held.is_current(3));
        after.clear();
        held.end_now(b"again", &mut after);
        held.close(&mut after);
        assert!(after.is_empty());
    }

    #[test]
    fn a_new_call_out_drops_what_was_held_of_the_one_before() {
        let mut held = Held::default();
        held.start(1);
        held.on_headers(pairs(&[(":status", "503")]), false);
        held.on_data(b"down".to_vec(), false);
        assert_eq!(held.abandon(), Some(1));
        held.start(2);
        assert!(held.is_current(2) && !held.is_current(1));
        assert_eq!(held.status(), 502);
        assert!(held.body().is_empty());
    }

    #[test]
    fn header_edits_apply_to_the_held_answer() {
        let mut held = Held::default();
        held.start(1);
        held.on_headers(pairs(&[(":status", "200"), ("x-a", "1")]), false);
        held.set_header("x-a", "2");
        held.set_header("x-b", "3");
        held.remove_header("x-missing");
        let headers = held.headers();
        assert_eq!(headers.get_str("x-a"), Some("2"));
        assert_eq!(headers.get_str("x-b"), Some("3"));
        held.remove_header("x-a");
        assert_eq!(held.headers().get("x-a"), None);
        held.replace_body(b"new".to_vec());
        assert_eq!(held.body().as_slice(), b"new");
    }
}
