//! What the client gets: the router's answer let through (timed, its ids rewritten), a
//! call-out's answer in its place, or an error Switchboard makes.

use super::*;
use crate::core::errors::ErrorReply;
use crate::core::health::sla::LatencySample;
use crate::core::outbound::hidden_answer_headers;
use crate::core::responses::id::Turn;
use crate::core::responses::rewrite::{self, AnswerRewriter};
use crate::core::responses::{rewrite_whole, TurnMinter};

impl Machine {
    /// Lets the router's answer through, with the resolved-model and attempts headers.
    pub(super) fn deliver<'c>(
        &mut self,
        config: &'c Config,
        answered_by: Option<ModelId>,
        status: u16,
        gave_up: bool,
        out: &mut Effects<'c>,
    ) {
        self.state = State::Delivering;
        self.seq += 1;
        self.holding = false;
        // No attempt follows: free the client's body now rather than when a long stream ends.
        self.replay = None;
        let measured = answered_by.filter(|_| self.measures && (200..300).contains(&status));
        if let Some(target) = measured {
            self.measure = Some(Measure {
                target,
                started_ms: self.routed_ms,
                first_token_ms: None,
                usage: UsageScanner::default(),
            });
        }
        // Minted ids are longer than the provider's: the length is no longer known.
        let rewrite = self.mint_ids && answered_by.is_some();
        if rewrite {
            self.rewriter = Some(AnswerRewriter::new());
        }
        // An answer from another target than the session's (a streamed fallback, or a first
        // attempt health sent elsewhere) keeps the session where it worked, as a call-out's.
        if (200..300).contains(&status) {
            self.pin_session(config, out);
        }
        // A translated answer's length changes too; its content type (JSON, or an event
        // stream) is the same in both APIs.
        let translated = self.translate_from(config, answered_by, status, self.routed_ms / 1000);
        let ending = self.end(answered_by, status, gave_up);
        out.push(Effect::Deliver(Delivery {
            ending,
            headers: self
                .answer_headers(config, answered_by, gave_up)
                .with_retry_after(self.retry_after(status, self.answer_hinted)),
            // A watched stream may end with an error event Switchboard adds: its length is
            // not known either.
            drop_content_length: rewrite || translated || self.dialect.is_some(),
            hidden: self.hidden_headers(config, answered_by),
        }));
    }

    pub(super) fn end(&mut self, target: Option<ModelId>, status: u16, gave_up: bool) -> Ending {
        let ending = Ending {
            target,
            status,
            attempts: self.attempts.total(),
            gave_up,
        };
        self.ending = Some(ending);
        ending
    }

    /// The headers Switchboard adds to the answer the client gets.
    pub(super) fn answer_headers<'c>(
        &self,
        config: &'c Config,
        answered_by: Option<ModelId>,
        gave_up: bool,
    ) -> AnswerHeaders<'c> {
        let names = &config.header_names;
        let total = self.attempts.total();
        AnswerHeaders {
            resolved_model: answered_by
                .and_then(|t| config.model(t))
                .map(|m| (names.resolved_model.as_str(), m.name.as_str())),
            attempts: (gave_up || total > 1).then(|| (names.attempts.as_str(), total.to_string())),
            retry_after: None,
        }
    }

    /// The client's `Retry-After` for a final `status` answer: when every target was evicted
    /// as the request was routed and the answer is a 429 or 503 without one of its own
    /// (`hinted`), the shortest eviction's time left, in whole seconds rounded up. A client
    /// that backs off by it comes back when a target is in service again.
    pub(super) fn retry_after(&self, status: u16, hinted: bool) -> Option<String> {
        let ms = self
            .evicted_for_ms
            .filter(|_| matches!(status, 429 | 503) && !hinted)?;
        Some(ms.div_ceil(1000).max(1).to_string())
    }

    /// The provider headers hidden from an answer by `target`.
    pub(super) fn hidden_headers<'c>(
        &self,
        config: &'c Config,
        target: Option<ModelId>,
    ) -> &'c [String] {
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        target.map_or(&[], |t| hidden_answer_headers(config, vm, t))
    }

    /// The minter of answers by `target` to this request.
    pub(super) fn minter<'c>(&self, config: &'c Config, target: ModelId) -> Option<TurnMinter<'c>> {
        let vm = config.virtual_models.get(self.virtual_model?)?;
        Some(TurnMinter {
            keys: &config.response_keys,
            turn: Turn {
                virtual_model: &vm.name,
                model: &config.model(target)?.name,
                caller: self.caller,
            },
        })
    }

    /// A chunk of the delivered answer with its ids rewritten, if that changed it.
    pub(super) fn rewrite_chunk(
        &mut self,
        config: &Config,
        chunk: &[u8],
        end: bool,
    ) -> Option<Vec<u8>> {
        let mut rewriter = self.rewriter.take()?;
        let answered_by = self.ending.and_then(|e| e.target);
        let mut minter = answered_by.and_then(|t| self.minter(config, t))?;
        let mut with = Vec::with_capacity(chunk.len() + rewrite::ROOM);
        // Most chunks of a long answer pass unchanged, as the rewriter tells: not compared.
        let changed = rewriter.feed(chunk, &mut minter, &mut with);
        if end {
            rewriter.finish(&mut with);
        }
        if !end {
            self.rewriter = Some(rewriter);
        }
        (changed && with != chunk).then_some(with)
    }

    /// The TTFT and TPOT samples and the token usage of a successful answer by `target`,
    /// timed (started, first token, ended) in milliseconds.
    pub(super) fn add_samples<'c>(
        &self,
        target: ModelId,
        (started_ms, first_token_ms, now_ms): (u64, Option<u64>, u64),
        usage: &UsageScanner,
        out: &mut Effects<'c>,
    ) {
        let first = first_token_ms.map(|t| t.saturating_sub(started_ms));
        let total = now_ms.saturating_sub(started_ms);
        let sample = LatencySample::of(self.stream, first, total, usage.output_tokens());
        let (prompt, completion) = usage.reported();
        let tokens = Tokens { prompt, completion };
        if !sample.is_empty() || tokens != Tokens::default() {
            out.push(Effect::Samples {
                target,
                sample,
                now_ms,
                tokens,
                for_routing: self.needs_latency,
            });
        }
    }

    /// After another target than the session's answered well (a fallback, or health moving
    /// the first attempt), keeps the request's sticky session on it for the rest of its
    /// window (TrueFoundry virtual models, "Sticky routing": fallback during a sticky session;
    /// `routing::sticky`: the session moves once). Without a known home (a complexity
    /// session), against the first attempt's target.
    pub(super) fn pin_session<'c>(&self, config: &'c Config, out: &mut Effects<'c>) {
        let (Some(session), Some(target)) = (self.sticky, self.attempts.current()) else {
            return;
        };
        if Some(target) == session.home.or(self.first_target) {
            return;
        }
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        if let (Some(vm), Some(model)) = (vm, config.model(target)) {
            out.push(Effect::Pin {
                virtual_model: &vm.name,
                session: session.hash,
                window: session.window,
                target: &model.name,
                idle_ms: vm.sticky.as_ref().and_then(|r| r.idle_ms),
            });
        }
    }

    /// Answers the client with a call-out's answer.
    pub(super) fn reply<'c>(
        &mut self,
        config: &'c Config,
        status: u16,
        answer: CallAnswer,
        gave_up: bool,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        let target = self.attempts.current();
        if let Some(t) = target.filter(|_| (200..300).contains(&status)) {
            self.pin_session(config, out);
            if self.measures {
                let mut usage = UsageScanner::default();
                usage.feed(&answer.body);
                // The whole answer arrived at once: no time to first token here.
                self.add_samples(t, (self.started_ms, None, now_ms), &usage, out);
            }
        }
        self.state = State::Done;
        // A translated attempt's answer goes back into the client's API (never minted: ids
        // are minted for the Responses API only, which is never translated).
        let translated = self.translated_reply(config, target, status, &answer.body, now_ms);
        let minted = match target.filter(|_| self.mint_ids && translated.is_none()) {
            Some(t) => self
                .minter(config, t)
                .map(|mut m| rewrite_whole(&answer.body, &mut m)),
            None => None,
        };
        let ending = self.end(target, status, gave_up);
        out.push(Effect::Reply(Box::new(Reply {
            ending,
            added: self
                .answer_headers(config, target, gave_up)
                .with_retry_after(
                    self.retry_after(status, answer.headers.get("retry-after").is_some()),
                ),
            hidden: self.hidden_headers(config, target),
            answer: answer.headers,
            body: translated.or(minted).unwrap_or(answer.body),
        })));
    }

    /// Whether the request continues a Responses conversation at its origin.
    pub(super) fn conversation_pinned(&self) -> bool {
        self.conversation && self.attempts.pinned()
    }

    /// Answers 503 when the last attempt got no answer at all. A pinned conversation's origin
    /// that failed gets 409 instead: another target would not hold the conversation, so there
    /// is no fallback (TrueFoundry virtual models, "Responses API conversations").
    pub(super) fn reply_unavailable<'c>(&mut self, config: &'c Config, out: &mut Effects<'c>) {
        let name = self
            .attempts
            .current()
            .and_then(|t| config.model(t))
            .map(|m| m.name.as_str());
        let error = if self.conversation_pinned() {
            ErrorReply::origin_unavailable(name.unwrap_or("the model"))
        } else {
            ErrorReply::no_target_available(name.unwrap_or("the requested model"))
        };
        self.fail(config, error, out);
    }

    /// Answers 504 when the fallback timeout of the last target the request moved to ran out
    /// (`fallback_timeout_at_last: "fail"`).
    pub(super) fn reply_timed_out<'c>(&mut self, config: &'c Config, out: &mut Effects<'c>) {
        let vm = self
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        let name = vm.map_or("the requested model", |vm| vm.name.as_str());
        self.fail(config, ErrorReply::fallback_timed_out(name), out);
    }

    /// Ends the request with an error Switchboard makes, in the client's API shape.
    pub(super) fn fail<'c>(
        &mut self,
        config: &'c Config,
        error: ErrorReply,
        out: &mut Effects<'c>,
    ) {
        let error = if self.anthropic_errors {
            error.in_anthropic_shape()
        } else {
            error
        };
        self.state = State::Done;
        let ending = self.end(None, error.status, true);
        let added = self
            .answer_headers(config, None, true)
            .with_retry_after(self.retry_after(error.status, false));
        out.push(Effect::Fail(Box::new(Failure {
            ending,
            error,
            added,
        })));
    }
}
