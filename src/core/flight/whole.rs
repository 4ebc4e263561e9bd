//! What the fallback timeout covers of the router's answer to a request that does not
//! stream (`fallback_timeout_scope`), and the router's answer after it was abandoned.
//!
//! Zuplo model load balancing, "Failures and retries": "A request that doesn't stream gets
//! its response only when the model finishes, so on chat completions and embeddings
//! fallbackTimeoutSeconds limits the whole response." A call-out's answer arrives whole, so
//! its time always bounds the whole answer; with `whole_answer` (the default) the router's
//! good answer is held until its end too, and abandoned like a call-out if the time runs out
//! first. With `answer_start` it goes on as soon as its headers come. A streamed answer is
//! let through as it starts, whatever the scope, so a long stream is never cut off.

use super::*;
use crate::core::config::TimeoutScope;

impl Machine {
    /// Whether the router's `status` answer is held until its end, still timed.
    pub(super) fn holds_whole(&self, status: u16, facts: &mut dyn AnswerFacts) -> bool {
        self.fallback_timeout_ms.is_some()
            && self.timeout_rules.scope == TimeoutScope::WholeAnswer
            && !self.stream
            && (200..300).contains(&status)
            && !facts.ends_with_headers()
    }

    /// The router's answer held whole with `status` ended: delivered if the request still
    /// waits for it, even after its attempt was abandoned (a late good answer wins, as a late
    /// one does at its headers). Whether it goes on.
    pub(super) fn whole_answer_ended<'c>(
        &mut self,
        config: &'c Config,
        status: u16,
        out: &mut Effects<'c>,
    ) -> bool {
        match self.state {
            State::Routed | State::Waiting(_) | State::Calling(_) => {
                let routed = self.routed_target;
                self.record(config, routed, AttemptOutcome::Status(status), || None, out);
                self.deliver(config, routed, status, false, out);
                true
            }
            // A call-out's answer (or Switchboard's error) replaced it.
            State::Delivering | State::Done => false,
        }
    }

    /// Headers of the router's attempt after it was abandoned for its fallback timeout: a
    /// good answer is still delivered (whole, when the time covers whole answers), and the
    /// next attempt's answer ignored; a failed one, already counted as a timeout, is kept from
    /// the client.
    pub(super) fn on_late_answer_headers<'c>(
        &mut self,
        config: &'c Config,
        status: u16,
        facts: &mut dyn AnswerFacts,
        out: &mut Effects<'c>,
    ) -> Flow {
        if !(200..300).contains(&status) {
            self.holding = true;
            return Flow::Hold;
        }
        if self.holds_whole(status, facts) {
            self.buffering = Some(status);
            return Flow::Hold;
        }
        let routed = self.routed_target;
        self.record(config, routed, AttemptOutcome::Status(status), || None, out);
        self.deliver(config, routed, status, false, out);
        Flow::Continue
    }
}
