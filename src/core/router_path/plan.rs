//! Which requests take the router path, the order of their attempts, and the headers that tell
//! Envoy's router that order and when to retry.

use super::{groups_header, router_cluster, GROUPS_HEADER, ROUTE_HEADER, ROUTE_VALUE};
use crate::core::answer_faults::judged;
use crate::core::config::{Budget, Config, ModelId, StreamFallbacks};
use crate::core::endpoint::Endpoint;
use crate::core::fallback::{AttemptOutcome, Attempts, Step};
use crate::core::flight::Start;
use crate::core::status_set::StatusSet;

/// No request makes more attempts than this (a route retries at most this many times less one).
const MAX_ATTEMPTS: usize = 16;

/// The attempts of a request on the router path, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterPlan {
    /// The virtual model.
    pub virtual_model: usize,
    /// Attempt n's target is `targets[n - 1]` (a target retried is there again).
    pub targets: Vec<ModelId>,
    /// Statuses the router retries on: every target's retry and fallback codes, and 503 (what
    /// the upstream pass makes of a stream that failed before its content).
    pub retry_on: StatusSet,
    /// `fallback_timeout_ms`: Envoy's per-try timeout, which ends at the attempt's response
    /// headers; the upstream pass holds those until the first content event.
    pub per_try_timeout_ms: Option<u64>,
}

/// The router path's plan for a request starting as `start` on `endpoint`, when its virtual
/// model asks for it (`stream_fallbacks: "router"`) and the request streams.
///
/// The order is fixed before the first attempt: it is the one a 503 at every attempt would take
/// ([`Attempts::after`]: each target's retries, then the next fallback candidate). What the
/// router cannot follow stays on the call-out path: a continued conversation (its origin failing
/// is a 409, not a fallback), a sticky session (pinned where a fallback answered), a virtual
/// model with a request budget (`request_deadline_ms`, `fallback_if_failed_within_ms`):
/// Envoy's route timeout (`x-envoy-upstream-rq-timeout-ms`) is the only whole-request bound the
/// router takes, and it runs to the end of the response, so it would cut a stream already
/// sent; and the router retries whatever an attempt's time to failure), and a virtual model
/// whose `fallback_on` judges 2xx answers (a refusal or an empty stream before its first
/// content would have to become a retriable status in the upstream pass, which it does not).
pub fn plan(config: &Config, endpoint: Endpoint, start: &Start) -> Option<RouterPlan> {
    let index = start.virtual_model?;
    let vm = config.virtual_models.get(index)?;
    let wanted = vm.streams.fallbacks == StreamFallbacks::Router && start.dialect.is_some();
    let budgeted = vm.budget != Budget::default();
    let judges = judged(vm.answer_fallbacks).is_some();
    if !wanted || start.conversation || start.sticky.is_some() || budgeted || judges {
        return None;
    }
    let fail_fast = vm.fail_fast.contains(endpoint.api());
    let mut attempts =
        Attempts::new(start.candidates.clone(), start.pinned).with_fail_fast(fail_fast);
    let mut targets = vec![attempts.current()?];
    while targets.len() < MAX_ATTEMPTS {
        match attempts.after(AttemptOutcome::Status(503), |m| vm.policy(m)) {
            Step::Retry { target, .. } | Step::Fallback { target } => targets.push(target),
            Step::Deliver | Step::GiveUp => break,
        }
    }
    let mut retry_on = StatusSet::of(&[503]);
    for target in &targets {
        let p = vm.policy(*target);
        retry_on = retry_on.union(p.retry_on).union(p.fallback_on);
    }
    Some(RouterPlan {
        virtual_model: index,
        targets,
        retry_on,
        per_try_timeout_ms: vm.fallback_timeout_ms.filter(|_| !fail_fast),
    })
}

impl RouterPlan {
    /// The request headers the Switchboard filter sets for the router: the route, the
    /// attempts' clusters, and the retry policy (Envoy's router, "x-envoy-max-retries",
    /// "x-envoy-retry-on", "x-envoy-retriable-status-codes",
    /// "x-envoy-upstream-rq-per-try-timeout-ms"). `None` if a target is not in the catalog.
    pub fn request_headers(&self, config: &Config) -> Option<Vec<(&'static str, String)>> {
        let mut clusters = Vec::with_capacity(self.targets.len());
        for target in &self.targets {
            clusters.push(router_cluster(&config.model(*target)?.cluster));
        }
        let codes: Vec<String> = (100..600)
            .filter(|c| self.retry_on.contains(*c))
            .map(|c| c.to_string())
            .collect();
        // No answer (refused, reset) moves on like a 503; a per-try timeout is a
        // `gateway-error` to the router.
        let mut retry_on =
            String::from("retriable-status-codes,reset,connect-failure,refused-stream");
        if self.per_try_timeout_ms.is_some() {
            retry_on.push_str(",gateway-error");
        }
        let mut headers = vec![
            (ROUTE_HEADER, ROUTE_VALUE.to_string()),
            (
                GROUPS_HEADER,
                groups_header(clusters.iter().map(String::as_str)),
            ),
            (
                "x-envoy-max-retries",
                self.targets.len().saturating_sub(1).to_string(),
            ),
            ("x-envoy-retry-on", retry_on),
            ("x-envoy-retriable-status-codes", codes.join(",")),
        ];
        if let Some(ms) = self.per_try_timeout_ms {
            headers.push(("x-envoy-upstream-rq-per-try-timeout-ms", ms.to_string()));
        }
        Some(headers)
    }

    /// Whether the router retries an attempt that answered `status` (when one is left).
    pub fn retries(&self, status: u16) -> bool {
        self.retry_on.contains(status)
    }
}
