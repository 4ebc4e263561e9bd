//! One forwarded request after its first attempt left through Envoy's router: health
//! bookkeeping and what Switchboard adds to the answer on its way to the client.

use super::filter::{After, Verdict};
use super::host::{Side, Stream};
use super::plugin::Plugin;
use super::store;
use crate::core::config::{ModelId, TargetPolicy, DIRECT_POLICY};
use crate::core::errors::ErrorReply;
use crate::core::fallback::{AttemptOutcome, Attempts, Step};
use crate::core::headers::Headers;
use crate::core::health::record::Outcome;
use crate::core::health::retry_after;
use crate::core::health::sla::LatencySample;
use crate::core::responses::rewrite::AnswerRewriter;
use crate::core::responses::TurnMinter;
use crate::core::usage::UsageScanner;

/// How a request was routed, as the flight starts.
pub struct Start {
    pub virtual_model: Option<usize>,
    pub attempts: Attempts,
    pub stream: bool,
    pub now_ms: u64,
    pub mint_ids: bool,
    pub anthropic_errors: bool,
    pub conversation: bool,
}

/// Timing of an answer as it streams to the client.
#[derive(Default)]
struct Measure {
    first_token_ms: Option<u64>,
    usage: UsageScanner,
}

/// The state of one forwarded request.
pub struct Flight {
    start: Start,
    routed_target: Option<ModelId>,
    holding: bool,
    measure: Option<Measure>,
    rewriter: Option<AnswerRewriter>,
    answered_by: Option<ModelId>,
}

impl Flight {
    /// A flight whose first attempt has just been handed to the router.
    pub fn new(start: Start) -> Flight {
        Flight {
            routed_target: start.attempts.current(),
            start,
            holding: false,
            measure: None,
            rewriter: None,
            answered_by: None,
        }
    }

    fn policy(plugin: &Plugin, virtual_model: Option<usize>, model: ModelId) -> &TargetPolicy {
        plugin
            .config
            .virtual_models
            .get(virtual_model.unwrap_or(usize::MAX))
            .map_or(&DIRECT_POLICY, |vm| vm.policy(model))
    }

    /// The router's response headers arrived.
    pub fn on_response_headers(
        &mut self,
        s: &mut Stream,
        plugin: &Plugin,
        after: &mut Vec<After>,
    ) -> Verdict {
        let status = s
            .header(Side::Response, ":status")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
            .unwrap_or(502);
        let now = super::now_ms();
        let outcome = router_outcome(s, status);
        let hint = || hint_ms(&s.headers(Side::Response), now);
        self.record(plugin, self.routed_target, outcome, hint, now);
        let vm = self.start.virtual_model;
        let step = self
            .start
            .attempts
            .after(outcome, |m| Self::policy(plugin, vm, m));
        if self.start.conversation && self.start.attempts.pinned() && outcome.is_target_down() {
            self.holding = true;
            self.reply_unavailable(plugin, after);
            return Verdict::Stop;
        }
        let answered = matches!(outcome, AttemptOutcome::Status(_))
            .then_some(self.routed_target)
            .flatten();
        let gave_up = !matches!(step, Step::Deliver);
        self.deliver(s, plugin, answered, status, gave_up);
        Verdict::Continue
    }

    /// Lets the router's answer through, with the resolved-model and attempts headers.
    fn deliver(
        &mut self,
        s: &mut Stream,
        plugin: &Plugin,
        answered_by: Option<ModelId>,
        status: u16,
        gave_up: bool,
    ) {
        self.holding = false;
        let needs_latency = self
            .start
            .virtual_model
            .and_then(|i| plugin.config.virtual_models.get(i))
            .is_some_and(|vm| vm.needs_latency());
        if (200..300).contains(&status) && needs_latency {
            self.measure = Some(Measure::default());
        }
        self.answered_by = answered_by;
        if self.start.mint_ids && answered_by.is_some() {
            // Minted ids are longer than the provider's: the length is no longer known.
            self.rewriter = Some(AnswerRewriter::new());
            s.remove_header(Side::Response, "content-length");
        }
        let names = &plugin.config.header_names;
        if let Some(m) = answered_by.and_then(|t| plugin.config.model(t)) {
            s.set_header(Side::Response, &names.resolved_model, m.name.as_bytes());
        }
        if gave_up || self.start.attempts.total() > 1 {
            let total = self.start.attempts.total().to_string();
            s.set_header(Side::Response, &names.attempts, total.as_bytes());
        }
    }

    /// A chunk of the router's answer.
    pub fn on_response_body(&mut self, s: &mut Stream, plugin: &Plugin, end: bool) -> Verdict {
        if self.holding {
            return Verdict::Stop;
        }
        if self.measure.is_none() && self.rewriter.is_none() {
            return Verdict::Continue;
        }
        let chunk = s.chunk(Side::Response);
        if let Some(m) = self.measure.as_mut() {
            let now = super::now_ms();
            if !chunk.is_empty() {
                m.usage.feed(&chunk);
                // Time to the first token, not to a role-only first chunk.
                if m.usage.has_content() {
                    m.first_token_ms.get_or_insert(now);
                }
            }
            if end {
                let (first, tokens) = (m.first_token_ms, m.usage.output_tokens());
                self.measure = None;
                self.add_samples(plugin, first, tokens, now);
            }
        }
        self.rewrite_chunk(s, plugin, &chunk, end);
        Verdict::Continue
    }

    /// Rewrites the ids in a chunk of the delivered answer, in Envoy's buffer.
    fn rewrite_chunk(&mut self, s: &mut Stream, plugin: &Plugin, chunk: &[u8], end: bool) {
        let Some(mut rewriter) = self.rewriter.take() else {
            return;
        };
        let config = &plugin.config;
        let vm = self
            .start
            .virtual_model
            .and_then(|i| config.virtual_models.get(i));
        let model = self.answered_by.and_then(|t| config.model(t));
        let (Some(vm), Some(model)) = (vm, model) else {
            return;
        };
        let mut minter = TurnMinter {
            keys: &config.response_keys,
            virtual_model: &vm.name,
            model: &model.name,
        };
        let mut out = Vec::with_capacity(chunk.len() + 128);
        rewriter.feed(chunk, &mut minter, &mut out);
        if end {
            rewriter.finish(&mut out);
        }
        if out != chunk {
            s.replace_chunk(Side::Response, &out);
        }
        if !end {
            self.rewriter = Some(rewriter);
        }
    }

    /// Trailers of the router's answer: a held answer stays held.
    pub fn on_response_trailers(&self) -> Verdict {
        if self.holding {
            Verdict::Stop
        } else {
            Verdict::Continue
        }
    }

    /// A call-out of this flight answered.
    pub fn on_callout_done(
        &mut self,
        _s: &mut Stream,
        _plugin: &Plugin,
        _id: u64,
        _headers: Headers,
        _body: Vec<u8>,
        _after: &mut Vec<After>,
    ) {
    }

    /// Adds the TTFT and TPOT samples of a successful answer that ended at `now`.
    fn add_samples(&self, plugin: &Plugin, first_token_ms: Option<u64>, tokens: u64, now: u64) {
        let Some(target) = self.start.attempts.current() else {
            return;
        };
        let first = first_token_ms.map(|t| t.saturating_sub(self.start.now_ms));
        let total = now.saturating_sub(self.start.now_ms);
        let sample = LatencySample::of(self.start.stream, first, total, tokens);
        if !sample.is_empty() {
            store::add_samples(plugin.id, &plugin.config, target, sample, now);
        }
    }

    /// Updates `target`'s health with an attempt's outcome. Statuses the model does not count
    /// as failures and that are not successes (a 404, say) change nothing. The provider's
    /// "come back in" hint is only read from a 429 (agentgateway seed).
    fn record(
        &self,
        plugin: &Plugin,
        target: Option<ModelId>,
        outcome: AttemptOutcome,
        hint: impl FnOnce() -> Option<u64>,
        now: u64,
    ) {
        let Some((target, model)) = target.and_then(|t| Some((t, plugin.config.model(t)?))) else {
            return;
        };
        let health = match outcome {
            AttemptOutcome::Status(s) if model.health.is_failure(s) => Outcome::Failure {
                hint_ms: if s == 429 { hint() } else { None },
            },
            AttemptOutcome::Status(s) if s < 400 => Outcome::Success,
            AttemptOutcome::Status(_) => return,
            AttemptOutcome::ConnectFailure
            | AttemptOutcome::Timeout
            | AttemptOutcome::FallbackTimeout => Outcome::Failure { hint_ms: None },
        };
        store::record(plugin.id, &plugin.config, target, health, now);
    }

    /// Answers 409 when a pinned conversation's origin is down: another target would not hold
    /// the conversation (TrueFoundry virtual models, "Responses API conversations").
    fn reply_unavailable(&mut self, plugin: &Plugin, after: &mut Vec<After>) {
        let name = self
            .start
            .attempts
            .current()
            .and_then(|t| plugin.config.model(t))
            .map_or("the model", |m| m.name.as_str());
        let reply = ErrorReply::origin_unavailable(name);
        let reply = if self.start.anthropic_errors {
            reply.in_anthropic_shape()
        } else {
            reply
        };
        let names = &plugin.config.header_names;
        after.push(After::Reply {
            status: reply.status,
            headers: vec![
                ("content-type".to_string(), "application/json".to_string()),
                (
                    names.attempts.clone(),
                    self.start.attempts.total().to_string(),
                ),
            ],
            body: reply.body.into_bytes(),
        });
    }
}

/// How the router's attempt ended: Envoy's own 5xx replies mean no answer came.
fn router_outcome(s: &Stream, status: u16) -> AttemptOutcome {
    if !(500..600).contains(&status) {
        return AttemptOutcome::Status(status);
    }
    match s.response_code_details().as_deref() {
        Some(d) if d.starts_with("upstream_reset_before_response_started") => {
            AttemptOutcome::ConnectFailure
        }
        Some("no_healthy_upstream" | "cluster_not_found") => AttemptOutcome::ConnectFailure,
        Some("upstream_response_timeout" | "upstream_per_try_timeout") => AttemptOutcome::Timeout,
        _ => AttemptOutcome::Status(status),
    }
}

/// The provider's "come back in" hint from a failed answer's headers.
fn hint_ms(headers: &Headers, now_ms: u64) -> Option<u64> {
    let names: Vec<&str> = headers.text_pairs().map(|(k, _)| k).collect();
    retry_after::hint_ms(|n| headers.get_str(n), &names, now_ms)
}
