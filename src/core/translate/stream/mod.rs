//! Streamed answers translated back into the client's API as they arrive: Anthropic's
//! Messages events into Chat Completions chunks ([`MessagesToChat`]) and the mirror
//! ([`ChatToMessages`]). Nothing is buffered but what crosses a chunk's end: SSE events may be
//! split anywhere between chunks, and one chunk may hold many; a partial line is carried, at most
//! [`MAX_CARRY`] bytes of it (and of one event's data), past which the stream is given up with
//! an error in the client's shape. The output does not depend on where chunks end.
//!
//! A stream that ends without its last event (`message_stop`, `[DONE]`) is left ended as it
//! is: the translation does not make a cut answer look whole.
//!
//! `framer` reads the provider's SSE into events; `to_chat` and `to_messages` hold each
//! direction's state and turn one event into the client's; [`Translator`] drives either.

mod framer;
#[cfg(test)]
mod tests;
mod to_chat;
mod to_messages;

use framer::Framer;
use serde::Serialize;

/// The most bytes one line, or one event's joined data, may take (no provider event comes
/// near it; a stream without line ends must not grow memory without bound).
pub const MAX_CARRY: usize = 1 << 20;

const OVERSIZED: &str = "The provider's stream carried a line or event over 1 MiB.";
const NOT_JSON: &str = "The provider's stream carried an event that is not JSON.";
const NO_MESSAGE: &str = "The provider reported an error.";

/// A line or an event's data passed [`MAX_CARRY`].
struct Overflow;

/// Translates an Anthropic Messages event stream into Chat Completions chunks.
pub type MessagesToChat = Translator<to_chat::ToChat>;

/// Translates a Chat Completions chunk stream into Anthropic Messages events.
pub type ChatToMessages = Translator<to_messages::ToMessages>;

/// What one direction does with the provider's events; [`Translator`] owns the framing.
trait Translate {
    /// One complete event: its `event:` name (empty when none) and its joined `data:`.
    fn event(&mut self, name: &[u8], data: &[u8], out: &mut Vec<u8>);
    /// The stream cannot be read on: an error in the client's shape, after which nothing.
    fn fail(&mut self, message: &str, out: &mut Vec<u8>);
    /// The last event or an error was sent: the rest of the stream is dropped.
    fn done(&self) -> bool;
}

/// A stream translation: the SSE framer and one direction's state (see [`MessagesToChat`],
/// [`ChatToMessages`]).
#[derive(Debug)]
pub struct Translator<S> {
    framer: Framer,
    state: S,
}

impl MessagesToChat {
    /// Chunks with id `id` (empty: `chatcmpl-` + the message id's suffix), `created` at
    /// `created_s`, and a usage chunk at the end when `include_usage`.
    pub fn new(id: &str, created_s: u64, include_usage: bool) -> MessagesToChat {
        Translator {
            framer: Framer::default(),
            state: to_chat::ToChat::new(id, created_s, include_usage),
        }
    }
}

impl ChatToMessages {
    /// Events for message `id` (empty: `msg_` + the chunks' id's suffix).
    pub fn new(id: &str) -> ChatToMessages {
        Translator {
            framer: Framer::default(),
            state: to_messages::ToMessages::new(id),
        }
    }
}

// `Translate` is how the two directions plug in, not API: callers name only the aliases.
#[allow(private_bounds)]
impl<S: Translate> Translator<S> {
    /// Feeds one chunk of the provider's stream; what it completes goes to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        self.read(Some(chunk), out);
    }

    /// The provider's stream ended: a last event without its blank line is read.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.read(None, out);
    }

    /// A chunk, or the end of the stream (`None`), through the framer into the state.
    fn read(&mut self, chunk: Option<&[u8]>, out: &mut Vec<u8>) {
        if self.state.done() {
            return;
        }
        let state = &mut self.state;
        let mut on = |name: &[u8], data: &[u8]| state.event(name, data, out);
        let read = match chunk {
            Some(chunk) => self.framer.push(chunk, &mut on),
            None => self.framer.finish(&mut on),
        };
        if read.is_err() {
            self.state.fail(OVERSIZED, out);
        }
    }
}

/// Appends `prefix`, `value` as JSON, and the blank line that ends the event.
fn write_event<T: Serialize>(out: &mut Vec<u8>, prefix: &[u8], value: &T) {
    let at = out.len();
    out.extend_from_slice(prefix);
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(at);
        return;
    }
    out.extend_from_slice(b"\n\n");
}
