//! A streamed answer's commit point and its honest end.
//!
//! A good (2xx) answer to a request that streams is held, its status and headers included,
//! until its first content event (a text or tool-call delta, an output item), or until the
//! virtual model's `stream_commit` bound. Before that, a failure the provider reports in the
//! stream (an `error` event, a `response.failed`, a line that is not an event, a reset, no
//! event for `stream_idle_timeout_ms`) is a failed attempt: it counts against the target and
//! falls back or retries like a failed status. After it the request never changes target: a
//! failure ends the stream with an error event in the client's API shape (a provider's own
//! error event already is one), counts against the target and in `stream_failed`.

use super::*;
use crate::core::answer_faults::AnswerFault;
use crate::core::fallback::StreamFault;
use crate::core::sse::Event;

/// The idle timer's tokens carry this bit, apart from the fallback timer's.
pub(super) const IDLE: u64 = 1 << 63;

/// A streamed answer held until its first content event.
#[derive(Debug, Clone)]
pub(super) struct Commit {
    watcher: Watcher,
    status: u16,
    /// Bytes of the held body already watched.
    fed: usize,
}

/// Where a failed stream's chunk is cut, and what follows the cut.
pub(super) struct Cut {
    /// Bytes of the chunk kept.
    pub keep: usize,
    /// The error event to send after them (none when the provider's own is kept).
    pub tail: Vec<u8>,
}

impl Machine {
    /// Whether the router's (or a streamed call-out's) `status` answer waits for its first
    /// content event.
    pub(super) fn holds_until_content(&self, status: u16, facts: &mut dyn AnswerFacts) -> bool {
        self.dialect.is_some() && (200..300).contains(&status) && !facts.ends_with_headers()
    }

    /// Holds the answer: the fallback timeout still runs (it bounds the time to the first
    /// event, never the whole stream), and a streamed call-out's idle timer starts.
    pub(super) fn hold_until_content<'c>(
        &mut self,
        status: u16,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) {
        let Some(dialect) = self.dialect else {
            return;
        };
        self.commit = Some(Box::new(Commit {
            watcher: Watcher::new(dialect),
            status,
            fed: 0,
        }));
        if self.streamed {
            self.idle_from_ms = facts.now_ms();
            self.arm_idle(out);
        }
    }

    /// A streamed call-out attempt at `target` starts: its answer comes as answer events.
    pub(super) fn stream_started(&mut self, target: ModelId, call: CallId, now_ms: u64) {
        self.state = State::Routed;
        self.stream_call = call;
        self.routed_target = Some(target);
        self.routed_ms = now_ms;
        self.holding = false;
        self.judging = None;
        self.commit = None;
    }

    /// A chunk of the held answer: committed at its first content event (or its bound, or
    /// its end), failed at an error before it, else still held.
    pub(super) fn on_uncommitted_body<'c>(
        &mut self,
        config: &'c Config,
        end: bool,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        let chunk = facts.chunk();
        let Some(commit) = self.commit.as_mut() else {
            return Flow::Continue;
        };
        let mut at = commit.fed.min(chunk.len());
        while let Some((event, next)) = commit.watcher.next(&chunk, at) {
            match event {
                // The watcher has read this event: watching goes on after it (from its start,
                // an event begun in an earlier chunk would be read again from its middle).
                Event::Content => return self.commit_now(config, &chunk, next, end, facts, out),
                // It ended before any content: `fallback_on` may judge it no answer.
                Event::Final => {
                    let held = chunk.get(..next).unwrap_or(&chunk);
                    return match self.judge_answer(held) {
                        Some(fault) => self.no_answer_before_commit(
                            config,
                            fault,
                            (&chunk, next, end),
                            facts,
                            out,
                        ),
                        None => self.commit_now(config, &chunk, next, end, facts, out),
                    };
                }
                Event::Error(_) => {
                    let cut = Cut {
                        keep: next,
                        tail: Vec::new(),
                    };
                    let now = facts.now_ms();
                    return self.fail_before_commit(
                        config,
                        StreamFault::ErrorEvent,
                        Some((&chunk, cut)),
                        now,
                        out,
                    );
                }
                Event::Malformed => {
                    let tail = terminal(
                        config,
                        self.routed_target,
                        &commit.watcher,
                        StreamFault::Malformed,
                    );
                    let cut = Cut { keep: at, tail };
                    let now = facts.now_ms();
                    return self.fail_before_commit(
                        config,
                        StreamFault::Malformed,
                        Some((&chunk, cut)),
                        now,
                        out,
                    );
                }
                Event::Other => at = next,
            }
        }
        commit.fed = chunk.len();
        let rules = self.stream_rules;
        let bound = commit.watcher.bytes() >= u64::from(rules.commit_max_bytes)
            || commit.watcher.events() >= rules.commit_max_events;
        // At the request's deadline no other attempt could replace it: it goes on now.
        if bound || end || self.deadline_spent {
            return self.commit_now(config, &chunk, chunk.len(), end, facts, out);
        }
        Flow::Hold
    }

    /// The held answer ended before any content and `fallback_on` judged it no answer (a
    /// refusal, nothing at all): counted as `fault` says, and the next attempt; with none to
    /// make, the client gets it as it is.
    fn no_answer_before_commit<'c>(
        &mut self,
        config: &'c Config,
        fault: AnswerFault,
        (chunk, from, end): (&[u8], usize, bool),
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        let outcome = AttemptOutcome::Answer(fault);
        let now = facts.now_ms();
        let step = self.step(config, outcome, || now);
        if let Step::Retry { .. } | Step::Fallback { .. } = step {
            self.commit = None;
            self.record(config, self.routed_target, outcome, || None, out);
            self.holding = true;
            self.next_attempt(config, step, outcome, now, out);
            return Flow::Hold;
        }
        self.commit_now_as(config, (chunk, from, end), outcome, facts, out)
    }

    /// The held answer goes to the client: its attempt succeeded; what follows `from` in the
    /// chunk in hand is watched from now on.
    fn commit_now<'c>(
        &mut self,
        config: &'c Config,
        chunk: &[u8],
        from: usize,
        end: bool,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        let status = self.commit.as_ref().map_or(200, |c| c.status);
        let outcome = AttemptOutcome::Status(status);
        self.commit_now_as(config, (chunk, from, end), outcome, facts, out)
    }

    /// [`Machine::commit_now`], its attempt recorded as `outcome`.
    fn commit_now_as<'c>(
        &mut self,
        config: &'c Config,
        (chunk, from, end): (&[u8], usize, bool),
        outcome: AttemptOutcome,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        let Some(commit) = self.commit_recorded(config, outcome, out) else {
            return Flow::Continue;
        };
        let mut watcher = commit.watcher;
        // Past the commit point only a failure or the stream's end changes anything.
        watcher.skip_content();
        self.watch = Some(Box::new(watcher));
        self.deliver_chunk(config, chunk, from, end, facts, out);
        Flow::Continue
    }

    /// Commits the held answer with no chunk in hand; its watch, if it is to go on.
    pub(super) fn commit_held<'c>(
        &mut self,
        config: &'c Config,
        out: &mut Effects<'c>,
    ) -> Option<Commit> {
        let status = self.commit.as_ref()?.status;
        self.commit_recorded(config, AttemptOutcome::Status(status), out)
    }

    /// Commits the held answer, its attempt recorded as `outcome`.
    fn commit_recorded<'c>(
        &mut self,
        config: &'c Config,
        outcome: AttemptOutcome,
        out: &mut Effects<'c>,
    ) -> Option<Commit> {
        let commit = *self.commit.take()?;
        self.seq += 1; // the answer started: the fallback timeout no longer applies
        let routed = self.routed_target;
        self.record(config, routed, outcome, || None, out);
        self.deliver(config, routed, commit.status, false, out);
        Some(commit)
    }

    /// The held answer failed before its first content: the next attempt, or, with none
    /// left, the client gets it as it is up to the failure and an honest end (`held`: the
    /// chunk in hand and where it is cut; none after a reset or an idle stream, when the
    /// client gets Switchboard's error instead).
    fn fail_before_commit<'c>(
        &mut self,
        config: &'c Config,
        fault: StreamFault,
        held: Option<(&[u8], Cut)>,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) -> Flow {
        let Some(commit) = self.commit.take() else {
            return Flow::Continue;
        };
        let routed = self.routed_target;
        let outcome = AttemptOutcome::StreamFailed(fault);
        self.record(config, routed, outcome, || None, out);
        let step = self.step(config, outcome, || now_ms);
        if self.ends_conversation(step, outcome) {
            self.holding = true;
            self.reply_unavailable(config, out);
            return Flow::Hold;
        }
        match (step, held) {
            (Step::Retry { .. } | Step::Fallback { .. }, _) => {
                self.holding = true;
                self.next_attempt(config, step, outcome, now_ms, out);
                Flow::Hold
            }
            (_, Some((chunk, cut))) => {
                self.seq += 1;
                self.deliver(config, routed, commit.status, true, out);
                self.ended = true;
                self.measure = None;
                self.end_in_chunk(config, chunk, cut, out);
                Flow::Continue
            }
            (_, None) => {
                self.reply_unavailable(config, out);
                Flow::Hold
            }
        }
    }

    /// Watches a delivered chunk from `from`: where to cut it if the stream failed in it (an
    /// error event is kept, a malformed line is not) or ended without the API's last event.
    pub(super) fn watch_chunk<'c>(
        &mut self,
        config: &'c Config,
        chunk: &[u8],
        from: usize,
        end: bool,
        out: &mut Effects<'c>,
    ) -> Option<Cut> {
        let watcher = self.watch.as_mut()?;
        let mut at = from.min(chunk.len());
        let mut failed = None;
        while let Some((event, next)) = watcher.next(chunk, at) {
            match event {
                Event::Error(_) => {
                    failed = Some((StreamFault::ErrorEvent, next));
                    break;
                }
                Event::Malformed => {
                    failed = Some((StreamFault::Malformed, at));
                    break;
                }
                Event::Content | Event::Final | Event::Other => at = next,
            }
        }
        if failed.is_none() && end {
            failed = match watcher.finish() {
                Some(Event::Error(_)) => Some((StreamFault::ErrorEvent, chunk.len())),
                Some(Event::Malformed) => Some((StreamFault::Malformed, at)),
                _ if !watcher.saw_final() => Some((StreamFault::Reset, chunk.len())),
                _ => None,
            };
        }
        let Some((fault, keep)) = failed else {
            if end {
                self.watch = None; // it ended well: nothing more to watch
            }
            return None;
        };
        let tail = match fault {
            StreamFault::ErrorEvent => Vec::new(),
            _ => terminal(config, self.routed_target, watcher, fault),
        };
        self.stream_failed(config, fault, out);
        Some(Cut { keep, tail })
    }

    /// Ends the answer inside the chunk in hand: what it keeps of it, then the error event,
    /// their ids rewritten together (a Responses `response.failed` names the id the client
    /// knows) or translated together (the error event is in the provider's dialect), and
    /// nothing after.
    pub(super) fn end_in_chunk<'c>(
        &mut self,
        config: &'c Config,
        chunk: &[u8],
        cut: Cut,
        out: &mut Effects<'c>,
    ) {
        let kept = chunk.get(..cut.keep).unwrap_or(chunk);
        let mut piece = Vec::with_capacity(kept.len() + cut.tail.len());
        piece.extend_from_slice(kept);
        piece.extend_from_slice(&cut.tail);
        let with = self.outgoing(config, &piece, true).unwrap_or(piece);
        out.push(Effect::ReplaceBody {
            len: chunk.len(),
            with,
        });
        out.push(Effect::EndAnswer { tail: Vec::new() });
    }

    /// The delivered stream failed: it counts against its target, and nothing more of it is
    /// watched, timed or let through.
    fn stream_failed<'c>(&mut self, config: &'c Config, fault: StreamFault, out: &mut Effects<'c>) {
        let target = self.ending.and_then(|e| e.target);
        self.record(
            config,
            target,
            AttemptOutcome::StreamFailed(fault),
            || None,
            out,
        );
        self.ended = true;
        self.watch = None;
        self.measure = None;
        self.idle_seq += 1;
    }

    /// The streamed call-out in flight was reset: before its answer started, like a call-out
    /// that got no answer; before its first content, a failed attempt; after it, the stream
    /// ends with an error event.
    pub fn on_answer_reset<'c>(
        &mut self,
        config: &'c Config,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) {
        let now = facts.now_ms();
        self.fail_stream(config, StreamFault::Reset, now, out);
    }

    /// The request is over (its access log is due): a watched stream that neither ended nor
    /// failed was cut. Envoy's response code details tell an upstream reset (which counts
    /// against the target) from a client that left (which does not). Where the router resets
    /// the client's stream no filter can write: this only counts it.
    pub fn on_logged<'c>(
        &mut self,
        config: &'c Config,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) {
        let held = matches!(self.state, State::Routed) && self.commit.is_some();
        let watched =
            matches!(self.state, State::Delivering) && !self.ended && self.watch.is_some();
        if !held && !watched {
            return;
        }
        let details = facts.code_details().unwrap_or_default();
        if !details.starts_with("upstream_reset_after_response_started") {
            return;
        }
        if held {
            // Reset before its first content: the client's stream went with it, so there is
            // no next attempt to make, only the failure to count.
            self.commit = None;
            let outcome = AttemptOutcome::StreamFailed(StreamFault::Reset);
            self.record(config, self.routed_target, outcome, || None, out);
        } else {
            self.stream_failed(config, StreamFault::Reset, out);
        }
    }

    /// A streamed call-out failed with no chunk in hand (a reset, an idle stream).
    fn fail_stream<'c>(
        &mut self,
        config: &'c Config,
        fault: StreamFault,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        if matches!(self.state, State::Routed) && self.on_judged_cut(config, now_ms, out) {
            return;
        }
        match self.state {
            State::Routed if self.commit.is_some() => {
                self.fail_before_commit(config, fault, None, now_ms, out);
            }
            State::Routed if !self.holding => {
                // No answer at all: the next step at once, as for a refused call-out.
                if let Some(target) = self.routed_target {
                    if let Some((next, kind)) = self.after_refusal(config, target, now_ms, out) {
                        self.dispatch(config, next, kind, now_ms, out);
                    }
                }
            }
            State::Delivering if !self.ended && self.streamed => {
                let Some(watcher) = self.watch.as_deref() else {
                    return;
                };
                let tail = terminal(config, self.routed_target, watcher, fault);
                let tail = self.outgoing(config, &tail, true).unwrap_or(tail);
                self.stream_failed(config, fault, out);
                out.push(Effect::EndAnswer { tail });
            }
            _ => {}
        }
    }

    /// Arms the idle timer for the streamed answer's last sign of life.
    fn arm_idle<'c>(&mut self, out: &mut Effects<'c>) {
        self.idle_seq += 1;
        out.push(Effect::ArmTimer {
            due_ms: self
                .idle_from_ms
                .saturating_add(self.stream_rules.idle_timeout_ms),
            token: IDLE | self.idle_seq,
        });
    }

    /// The idle timer fired: the stream failed if nothing came since it was armed, else it
    /// is armed again from the last chunk (one timer per stream, not one per chunk).
    pub(super) fn on_idle_timer<'c>(
        &mut self,
        config: &'c Config,
        token: u64,
        now_ms: u64,
        out: &mut Effects<'c>,
    ) {
        let watching = self.commit.is_some() || (self.watch.is_some() && !self.ended);
        if token != IDLE | self.idle_seq || !watching {
            return;
        }
        let due = self
            .idle_from_ms
            .saturating_add(self.stream_rules.idle_timeout_ms);
        if now_ms < due {
            return self.arm_idle(out);
        }
        self.fail_stream(config, StreamFault::Idle, now_ms, out);
    }
}

/// The honest end of `target`'s stream that failed so, in the client's API shape (a
/// Responses `response.failed` continues the stream's own id and sequence).
fn terminal(
    config: &Config,
    target: Option<ModelId>,
    watcher: &Watcher,
    fault: StreamFault,
) -> Vec<u8> {
    let name = target
        .and_then(|t| config.model(t))
        .map_or("the target", |m| m.name.as_str());
    let (why, code) = match fault {
        StreamFault::Reset => ("the upstream reset it before its end", "stream_reset"),
        StreamFault::Idle => ("it sent nothing for too long", "stream_idle"),
        StreamFault::Malformed => ("it sent a line that is not an event", "stream_malformed"),
        StreamFault::ErrorEvent => ("it reported an error", "stream_error"),
    };
    let message = format!("the stream from {name} failed: {why}");
    watcher.terminal_event(&message, code)
}
