//! What the filter tells the operator about a request it routed: metrics, the access log's
//! filter state, and its debug and warn lines. The facts come from the core (the plan, the
//! flight's effects); this file only writes them to the host.

use super::host;
use super::metrics;
use crate::core;
use crate::core::access_log::{self, DecisionFacts, Value};
use crate::core::config::Config;
use crate::core::flight::{Effect, Ending};
pub use crate::core::report::PinProbe;
use crate::core::routing::Plan;
use crate::core::trace::Trace;

/// A request was routed: count it against its first target, time the decision, write the
/// decision's access-log fields, and say where it goes at debug level.
pub fn decided(config: &Config, plan: &Plan, facts: DecisionFacts) {
    core::report::decided(config, plan, facts.decision_us, metrics::write);
    if config.filter_state {
        write_fields(access_log::decision(config, plan, facts));
    }
}

/// Writes access-log fields as filter state (no allocation: numbers go through a stack buffer).
pub fn write_fields<'a>(fields: impl Iterator<Item = (&'static str, Value<'a>)>) {
    let mut buf = [0u8; 20];
    for (key, value) in fields {
        host::set_filter_state(key, value.bytes(&mut buf));
    }
}

/// What one forwarded request's reports still need as its flight goes on: the core's
/// metric and trace bookkeeping ([`core::report::Report`]), whose writes go to the host here.
#[derive(Default)]
pub struct Report(core::report::Report);

impl Report {
    /// The report of a request routed to `virtual_model`.
    pub fn new(virtual_model: Option<usize>, trace: Option<Box<Trace>>) -> Report {
        Report(core::report::Report::new(virtual_model, trace))
    }

    /// The virtual model called.
    pub fn virtual_model(&self) -> Option<usize> {
        self.0.virtual_model()
    }

    /// Notes an effect of the flight before it is applied: writes its metrics, and at the
    /// ending its access-log fields (the core writes the warn line of a failed request). For
    /// an ending, returns the trace header's value if the request asked for it.
    pub fn effect(&mut self, config: &Config, effect: &Effect<'_>) -> Option<String> {
        let trace = self.0.effect(config, effect, metrics::write);
        if let Some(ending) = core::report::ending(effect) {
            self.ended(config, ending);
        }
        trace
    }

    /// The request's answer goes to the client.
    fn ended(&self, config: &Config, ending: &Ending) {
        if config.filter_state {
            let fallback = self.0.fallback();
            write_fields(access_log::outcome(
                config,
                ending.target,
                ending.attempts,
                fallback,
            ));
        }
    }
}
