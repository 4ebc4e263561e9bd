//! A translated attempt's answer, back in the client's API: a virtual model's
//! target that does not serve the client's API natively was sent the request translated
//! ([`crate::core::translate::direction`]), so what it answers is in its own API.
//!
//! The provider's own events drive the commit point, the watcher (its honest end), usage and
//! latency samples: the attempt's [`Dialect`] is its target's, and the bytes are translated
//! only as they go to the client. A 2xx streamed answer is translated event by event as it is
//! delivered (never buffered past an event); a whole answer (JSON, or an error of any status)
//! is held to its end and replaced at once.

use super::*;
use crate::core::endpoint::Endpoint;
use crate::core::translate::stream::{ChatToMessages, MessagesToChat};
use crate::core::translate::{self, answer, Direction};

/// How the delivered answer of a translated attempt is translated.
#[derive(Debug)]
pub(super) enum Translation {
    /// Anthropic Messages events → Chat Completions chunks, as they arrive.
    ToChat(MessagesToChat),
    /// Chat Completions chunks → Anthropic Messages events, as they arrive.
    ToMessages(ChatToMessages),
    /// A whole answer with `status`: held to its end, then translated at once.
    Whole {
        direction: Direction,
        status: u16,
        created_s: u64,
    },
}

impl Translation {
    /// The translation of a `status` answer coming back `direction`; `stream`: the client
    /// asked for a streamed answer (only a 2xx one streams: an error is a JSON object).
    pub(super) fn new(
        direction: Direction,
        status: u16,
        stream: bool,
        include_usage: bool,
        created_s: u64,
    ) -> Translation {
        if !stream || !(200..300).contains(&status) {
            return Translation::Whole {
                direction,
                status,
                created_s,
            };
        }
        // An empty id: derived from the provider's (`msg_…` ↔ `chatcmpl-…`), unique per answer
        // and kept for support cases.
        match direction {
            Direction::ChatToMessages => {
                Translation::ToChat(MessagesToChat::new("", created_s, include_usage))
            }
            Direction::MessagesToChat => Translation::ToMessages(ChatToMessages::new("")),
        }
    }

    /// Whether the answer is held to its end before it is translated.
    pub(super) fn is_whole(&self) -> bool {
        matches!(self, Translation::Whole { .. })
    }

    /// Translates the provider's `bytes` into `out` (`end`: the last of them; a whole answer
    /// is given all at once, at its end). A body that is not the answer or error object it
    /// should be goes on as it is.
    pub(super) fn push(&mut self, bytes: &[u8], end: bool, out: &mut Vec<u8>) {
        match self {
            Translation::ToChat(t) => {
                t.push(bytes, out);
                if end {
                    t.finish(out);
                }
            }
            Translation::ToMessages(t) => {
                t.push(bytes, out);
                if end {
                    t.finish(out);
                }
            }
            Translation::Whole {
                direction,
                status,
                created_s,
            } => {
                let ok = (200..300).contains(status);
                let translated = match (direction, ok) {
                    (Direction::ChatToMessages, true) => {
                        answer::messages_answer_to_chat(bytes, *created_s)
                    }
                    (Direction::MessagesToChat, true) => answer::chat_answer_to_messages(bytes),
                    (Direction::ChatToMessages, false) => answer::error_to_openai(bytes),
                    (Direction::MessagesToChat, false) => {
                        answer::error_to_anthropic(bytes, *status)
                    }
                };
                match translated {
                    Some(body) => out.extend_from_slice(&body),
                    None => out.extend_from_slice(bytes),
                }
            }
        }
    }
}

/// Whether the client's request asks for the usage chunk a translated stream must add: the
/// body is read only for a streamed Chat Completions request with a candidate translated to
/// Messages (the untranslated path pays for no parse).
pub fn usage_asked(
    config: &Config,
    vm: Option<&VirtualModel>,
    candidates: &[ModelId],
    replay: &Replay,
    stream: bool,
) -> bool {
    let translated = |t: &ModelId| {
        config.model(*t).is_some_and(|m| {
            translate::direction(vm, replay.endpoint, m) == Some(Direction::ChatToMessages)
        })
    };
    stream
        && replay.endpoint == Endpoint::ChatCompletions
        && candidates.iter().any(translated)
        && translate::request::wants_usage(&replay.body)
}

impl Machine {
    /// How an attempt at `target` is translated, if it is.
    pub(super) fn direction_of(&self, config: &Config, target: ModelId) -> Option<Direction> {
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        translate::direction(vm, self.endpoint, config.model(target)?)
    }

    /// An attempt at `target` starts: its streamed answer reads in its target's dialect (the
    /// commit point, the honest end, usage and latency read the provider's own events).
    pub(super) fn aim(&mut self, config: &Config, target: ModelId) {
        self.dialect = match self.direction_of(config, target) {
            Some(d) => self.client_dialect.and(Dialect::of(d.target_endpoint())),
            None => self.client_dialect,
        };
    }

    /// Starts translating the answer `answered_by` gives with `status`, if its attempt was
    /// translated; whether it is.
    pub(super) fn translate_from(
        &mut self,
        config: &Config,
        answered_by: Option<ModelId>,
        status: u16,
        created_s: u64,
    ) -> bool {
        let direction = answered_by.and_then(|t| self.direction_of(config, t));
        self.translation = direction.map(|d| {
            Box::new(Translation::new(
                d,
                status,
                self.stream,
                self.include_usage,
                created_s,
            ))
        });
        self.translation.is_some()
    }

    /// Whether the delivered answer is held to its end, to be translated whole.
    pub(super) fn holds_translated(&self) -> bool {
        self.translation
            .as_deref()
            .is_some_and(Translation::is_whole)
    }

    /// The bytes of the delivered answer as the client gets them, if they change: translated,
    /// or their ids rewritten (`end`: nothing of the answer follows them).
    pub(super) fn outgoing(&mut self, config: &Config, bytes: &[u8], end: bool) -> Option<Vec<u8>> {
        let Some(translation) = self.translation.as_mut() else {
            return self.rewrite_chunk(config, bytes, end);
        };
        let mut with = Vec::with_capacity(bytes.len() + 256);
        translation.push(bytes, end, &mut with);
        if end {
            self.translation = None;
        }
        Some(with)
    }

    /// A call-out's whole `status` answer from `target`, in the client's API if its attempt
    /// was translated (a streamed request's answer is a whole event stream here).
    pub(super) fn translated_reply(
        &self,
        config: &Config,
        target: Option<ModelId>,
        status: u16,
        body: &[u8],
        now_ms: u64,
    ) -> Option<Vec<u8>> {
        let direction = self.direction_of(config, target?)?;
        let mut translation = Translation::new(
            direction,
            status,
            self.stream,
            self.include_usage,
            now_ms / 1000,
        );
        let mut out = Vec::with_capacity(body.len() + 256);
        translation.push(body, true, &mut out);
        Some(out)
    }
}
