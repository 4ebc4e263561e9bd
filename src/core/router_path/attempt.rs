//! One request's attempts on the router path, as the upstream pass sees them: each attempt's
//! request computed from the client's (by [`outbound`], like every attempt's), and each
//! attempt's answer held until its first content event.
//!
//! The router retries an attempt whose status is in the plan's codes; the upstream pass makes a
//! 2xx stream that fails before its content a 503, so that it is retried too (the commit point,
//! as on the call-out path). What each attempt did is logged as effects (the attempt, the
//! failure of one the router retries) for the Switchboard filter to apply when the router's
//! answer reaches it: health, metrics and the trace, through the same interpreter as every
//! other effect.

use super::RouterPlan;
use crate::core::config::{Config, ModelId, StreamRules};
use crate::core::fallback::{AttemptOutcome, StreamFault};
use crate::core::flight::{attempt_record, failure_class, Attempt, AttemptKind, Effect, Replay};
use crate::core::health::failure_class::{FailureClass, MAX_JUDGED_BODY};
use crate::core::outbound::{outbound, ClientRequest, Outbound};
use crate::core::sse::{Dialect, Event, Watcher};
use crate::core::translate::direction;

/// What one attempt's request becomes before it leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRequest {
    /// Headers to set, pseudo-headers included, after `remove`.
    pub set: Vec<(String, String)>,
    /// Headers to remove.
    pub remove: Vec<String>,
    /// The whole body, when it is not the one the router replays.
    pub body: Option<Vec<u8>>,
}

/// What to do with an attempt's held answer after a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyVerdict {
    /// Keep holding.
    Hold,
    /// Let it through as it is: committed.
    Pass,
    /// Failed before its content: let it through as a 503, which the router retries.
    Fail,
}

/// One attempt's answer, watched until its first content event.
#[derive(Debug)]
pub struct AttemptWatch {
    number: u32,
    watcher: Watcher,
    /// Bytes of the held body already watched.
    fed: usize,
    /// A failed answer the router retries, held until its body ends to tell its class (a
    /// 429 may be a spent quota): its status.
    failed: Option<u16>,
}

/// How far one attempt got, as its upstream pass saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// No answer yet.
    Nothing,
    /// A good streamed answer, held until its first content event.
    Held,
    /// An answer the router has: it goes to the client unless the router retries it.
    Answered,
    /// A failure the router retries, recorded.
    Settled,
}

#[cfg(test)]
impl AttemptWatch {
    /// A watch of attempt `number` in `dialect`, as [`RouterFlight::on_status`] makes one.
    pub fn for_test(number: u32, dialect: Dialect) -> Self {
        AttemptWatch {
            number,
            watcher: Watcher::new(dialect),
            fed: 0,
            failed: None,
        }
    }
}

#[cfg(test)]
impl RouterFlight {
    /// [`RouterFlight::dialect_of`], for a test.
    pub fn dialect_of_for_test(&self, config: &Config, number: u32) -> Dialect {
        self.dialect_of(config, number)
    }
}

/// The request's attempts, shared by its Switchboard filter and its upstream passes.
#[derive(Debug)]
pub struct RouterFlight {
    plan: RouterPlan,
    client: Replay,
    dialect: Dialect,
    rules: StreamRules,
    /// What attempt n did, at `seen[n - 1]`.
    seen: Vec<Seen>,
    /// When attempt n left, at `started_ms[n - 1]`.
    started_ms: Vec<u64>,
    /// Attempts begun.
    begun: u32,
    /// How the last failed attempt ended: the reason of the next one.
    last: Option<AttemptOutcome>,
    /// What the attempts did, for the Switchboard filter to apply.
    log: Vec<Effect<'static>>,
}

impl RouterFlight {
    /// The attempts of `plan`, for the client's request `client` streaming in `dialect`.
    pub fn new(plan: RouterPlan, client: Replay, dialect: Dialect, rules: StreamRules) -> Self {
        let n = plan.targets.len();
        RouterFlight {
            plan,
            client,
            dialect,
            rules,
            seen: vec![Seen::Nothing; n],
            started_ms: vec![0; n],
            begun: 0,
            last: None,
            log: Vec::new(),
        }
    }

    /// The client's request back, for a host that did not take the attempts.
    pub fn into_client(self) -> Replay {
        self.client
    }

    /// The plan.
    pub fn plan(&self) -> &RouterPlan {
        &self.plan
    }

    fn target(&self, number: u32) -> Option<ModelId> {
        self.plan
            .targets
            .get(number.checked_sub(1)? as usize)
            .copied()
    }

    fn outbound<'c>(&self, config: &'c Config, number: u32) -> Option<Outbound<'c>> {
        let vm = config.virtual_models.get(self.plan.virtual_model);
        let client = ClientRequest {
            endpoint: self.client.endpoint,
            headers: &self.client.headers,
            body: Some((self.client.body.as_slice(), &self.client.layout)),
            stored_path: None,
        };
        outbound(config, vm, self.target(number)?, &client)
    }

    /// How attempt `number`'s answer reads: the provider's own events, in its target's API when
    /// the attempt is translated (`translate`).
    fn dialect_of(&self, config: &Config, number: u32) -> Dialect {
        let vm = config.virtual_models.get(self.plan.virtual_model);
        let translated = self
            .target(number)
            .and_then(|t| config.model(t))
            .and_then(|m| direction(vm, self.client.endpoint, m));
        translated
            .and_then(|d| Dialect::of(d.target_endpoint()))
            .unwrap_or(self.dialect)
    }

    /// Attempt `number` (the router's `x-envoy-attempt-count`) leaves at `now_ms`: its request,
    /// from the client's and undoing what the previous attempt changed (the router hands each
    /// attempt the headers the last one left). `None` if there is no such attempt in the plan
    /// or its request cannot be built.
    pub fn begin(&mut self, config: &Config, number: u32, now_ms: u64) -> Option<AttemptRequest> {
        let target = self.target(number)?;
        self.settle(config, number, now_ms);
        let request = if number == 1 {
            // The Switchboard filter wrote the first attempt into the request (the same
            // `outbound`), and the route removes the cluster header.
            AttemptRequest {
                set: Vec::new(),
                remove: Vec::new(),
                body: None,
            }
        } else {
            let this = self.outbound(config, number)?;
            let body = match &this.edits {
                Some(edits) => edits.apply(&self.client.body)?,
                None => self.client.body.clone(),
            };
            let previous = self.outbound(config, number - 1);
            attempt_request(&this, previous.as_ref(), &self.client, config, body)
        };
        let kind = match (number, self.last) {
            (1, _) | (_, None) => AttemptKind::First,
            (n, Some(o)) if self.target(n - 1) == Some(target) => AttemptKind::Retry(o),
            (_, Some(o)) => AttemptKind::Fallback(o),
        };
        self.log.push(Effect::Attempt(Attempt {
            target,
            number,
            kind,
            call: None,
            // Envoy's router waits its own back-off: not timed here.
            delay_ms: 0,
        }));
        if let Some(at) = self.started_ms.get_mut(number as usize - 1) {
            *at = now_ms;
        }
        self.begun = self.begun.max(number);
        Some(request)
    }

    /// Attempts before `number` that never answered (refused, reset) or were still held at
    /// their commit point (reset, or past the per-try timeout) failed: recorded once, when the
    /// next begins or the router's answer arrives at `now_ms`.
    fn settle(&mut self, config: &Config, number: u32, now_ms: u64) {
        let before = number.saturating_sub(1).min(self.begun);
        for n in 1..=before {
            let i = n as usize - 1;
            let seen = self.seen.get(i).copied();
            if !matches!(seen, Some(Seen::Nothing | Seen::Held)) {
                continue;
            }
            // It ended when the next attempt left (or now, for the last).
            let start = self.started_ms.get(i).copied().unwrap_or(now_ms);
            let end = self.started_ms.get(i + 1).copied().filter(|t| *t > 0);
            let elapsed = end.unwrap_or(now_ms).saturating_sub(start);
            let timed_out = self.plan.per_try_timeout_ms.is_some_and(|ms| elapsed >= ms);
            let outcome = match seen {
                _ if timed_out => AttemptOutcome::FallbackTimeout,
                Some(Seen::Held) => AttemptOutcome::StreamFailed(StreamFault::Reset),
                _ => AttemptOutcome::ConnectFailure,
            };
            self.mark(n, Seen::Settled);
            self.fail(config, n, outcome);
        }
    }

    fn mark(&mut self, number: u32, seen: Seen) {
        if let Some(s) = self.seen.get_mut((number as usize).wrapping_sub(1)) {
            *s = seen;
        }
    }

    fn fail(&mut self, config: &Config, number: u32, outcome: AttemptOutcome) {
        self.fail_with(config, number, outcome, &[]);
    }

    /// Records attempt `number`'s failure, its class told from `body` (the error body held
    /// until its end, or nothing: by status alone).
    fn fail_with(&mut self, config: &Config, number: u32, outcome: AttemptOutcome, body: &[u8]) {
        self.last = Some(outcome);
        let vm = config.virtual_models.get(self.plan.virtual_model);
        let recorded = self.target(number).and_then(|t| {
            let class = failure_class(config, vm, t, outcome, body);
            attempt_record(config, vm, t, (outcome, class), || None)
        });
        self.log.extend(recorded);
    }

    /// Attempt `number`'s answer started with `status` (`ends`: nothing follows). A good
    /// streamed answer is watched until its first content event; a failure the router retries
    /// is logged; the last attempt's answer is the Switchboard filter's to judge.
    pub fn on_status(
        &mut self,
        config: &Config,
        number: u32,
        status: u16,
        ends: bool,
    ) -> Option<AttemptWatch> {
        self.mark(number, Seen::Answered);
        let last = number as usize >= self.plan.targets.len();
        if last {
            return None;
        }
        if (200..300).contains(&status) && !ends {
            self.mark(number, Seen::Held);
            return Some(AttemptWatch {
                number,
                watcher: Watcher::new(self.dialect_of(config, number)),
                fed: 0,
                failed: None,
            });
        }
        let retried = !(200..300).contains(&status) && self.plan.retries(status);
        if retried && FailureClass::needs_body(status) && !ends {
            // Held until its body ends, then let on: the router retries it by its status.
            self.mark(number, Seen::Held);
            return Some(AttemptWatch {
                number,
                watcher: Watcher::new(self.dialect_of(config, number)),
                fed: 0,
                failed: Some(status),
            });
        }
        if retried {
            self.mark(number, Seen::Settled);
            self.fail(config, number, AttemptOutcome::Status(status));
        }
        None
    }

    /// The held answer of `watch`'s attempt so far (`body`: every byte held; `end`: it ended).
    pub fn on_body(
        &mut self,
        config: &Config,
        watch: &mut AttemptWatch,
        body: &[u8],
        end: bool,
    ) -> BodyVerdict {
        if let Some(status) = watch.failed {
            let over = body.len() > MAX_JUDGED_BODY;
            if !end && !over {
                return BodyVerdict::Hold;
            }
            self.mark(watch.number, Seen::Settled);
            let judged = if over { &[][..] } else { body };
            self.fail_with(config, watch.number, AttemptOutcome::Status(status), judged);
            return BodyVerdict::Pass;
        }
        let mut at = watch.fed.min(body.len());
        while let Some((event, next)) = watch.watcher.next(body, at) {
            at = next;
            let fault = match event {
                Event::Content | Event::Final => {
                    self.mark(watch.number, Seen::Answered);
                    return BodyVerdict::Pass;
                }
                Event::Error(_) => StreamFault::ErrorEvent,
                Event::Malformed => StreamFault::Malformed,
                Event::Other => continue,
            };
            self.mark(watch.number, Seen::Settled);
            self.fail(config, watch.number, AttemptOutcome::StreamFailed(fault));
            return BodyVerdict::Fail;
        }
        watch.fed = body.len();
        let bounded = watch.watcher.events() >= self.rules.commit_max_events
            || watch.watcher.bytes() >= u64::from(self.rules.commit_max_bytes);
        if bounded || end {
            // Past the hold's bound, or an answer that ended with no content and no error:
            // the Switchboard filter judges it as it does any answer.
            self.mark(watch.number, Seen::Answered);
            return BodyVerdict::Pass;
        }
        BodyVerdict::Hold
    }

    /// The router's answer reached the Switchboard filter: the attempt it came from (the
    /// last that answered, else the last begun) at `now_ms`, and what the attempts did.
    pub fn take_answered(&mut self, config: &Config, now_ms: u64) -> RouterAnswer {
        let begun = self.begun;
        let served = (1..=begun)
            .rev()
            .find(|n| self.seen.get(*n as usize - 1) == Some(&Seen::Answered))
            .unwrap_or(begun);
        self.settle(config, served, now_ms);
        let fallbacks = (2..=begun)
            .filter(|n| self.target(*n) != self.target(n - 1))
            .count() as u32;
        RouterAnswer {
            target: self.target(served),
            attempts: begun,
            fallbacks,
            log: std::mem::take(&mut self.log),
        }
    }
}

/// What the router's attempts did, when its answer reaches the Switchboard filter.
#[derive(Debug)]
pub struct RouterAnswer {
    /// The target whose answer it is.
    pub target: Option<ModelId>,
    /// Attempts made.
    pub attempts: u32,
    /// Moves to another target among them.
    pub fallbacks: u32,
    /// Their attempts and failures, as effects to apply.
    pub log: Vec<Effect<'static>>,
}

/// Attempt `this`'s headers and body: what `previous` set or removed goes back to the client's
/// value first (or away, if the client sent none), so nothing of one target reaches another.
fn attempt_request(
    this: &Outbound<'_>,
    previous: Option<&Outbound<'_>>,
    client: &Replay,
    config: &Config,
    body: Vec<u8>,
) -> AttemptRequest {
    let original = |name: &str| client.headers.get_str(name).map(str::to_string);
    let mut set: Vec<(String, String)> = Vec::new();
    let mut remove: Vec<String> = vec![
        config.header_names.cluster.clone(),
        "transfer-encoding".to_string(),
    ];
    if let Some(prev) = previous {
        let touched = prev
            .set
            .iter()
            .map(|(n, _)| *n)
            .chain(prev.remove.iter().copied());
        for name in touched {
            match original(name) {
                Some(value) => set.push((name.to_string(), value)),
                None => remove.push(name.to_string()),
            }
        }
    }
    let path = this.path.clone().or_else(|| original(":path"));
    let authority = this
        .authority
        .map(str::to_string)
        .or_else(|| original(":authority"));
    set.extend(path.map(|p| (":path".to_string(), p)));
    set.extend(authority.map(|a| (":authority".to_string(), a)));
    for name in &this.remove {
        set.retain(|(n, _)| n != name);
        remove.push(name.to_string());
    }
    for (name, value) in &this.set {
        set.retain(|(n, _)| n != name);
        remove.retain(|n| n != name);
        set.push((name.to_string(), value.to_string()));
    }
    set.push(("content-length".to_string(), body.len().to_string()));
    AttemptRequest {
        set,
        remove,
        body: Some(body),
    }
}
