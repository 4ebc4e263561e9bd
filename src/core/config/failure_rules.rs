//! A virtual model's own failure rules, beside each target's `retry_config` and fallback
//! fields: `fallback_timeout_ms` and how it grows, ends and what it bounds,
//! `max_targets_per_request` and `fail_fast_endpoints` (Zuplo model load balancing, "Failures
//! and retries"), and the request's own budget: `request_deadline_ms` and
//! `fallback_if_failed_within_ms`.

use super::fields::{ConfigError, Fields};
use super::virtual_model::{AtLast, TimeoutRules, TimeoutScope};
use crate::core::endpoint::{Api, Apis};

/// A virtual model's own failure rules, beside each target's `retry_config` and fallback
/// fields (Zuplo model load balancing, "Failures and retries").
pub(super) struct FailureRules {
    /// `fallback_timeout_ms`.
    pub fallback_timeout_ms: Option<u64>,
    /// `max_targets_per_request`.
    pub max_targets: Option<usize>,
    /// How `fallback_timeout_ms` grows, ends and what it bounds.
    pub timeout_rules: TimeoutRules,
    /// `fail_fast_endpoints`.
    pub fail_fast: Apis,
    /// `request_deadline_ms` and `fallback_if_failed_within_ms`.
    pub budget: Budget,
}

/// The time a request may take across its attempts, and how slow a failure may be and still
/// be followed by another attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    /// `request_deadline_ms`: from the moment the request is routed, no attempt starts after
    /// it, and one in flight that has not started answering is abandoned.
    pub deadline_ms: Option<u64>,
    /// `fallback_if_failed_within_ms`: a failure slower than this (its attempt's own time) is
    /// the client's answer, not a reason for another attempt.
    pub failed_within_ms: Option<u64>,
}

/// Reads `fallback_timeout_ms` and the options that shape it, `max_targets_per_request` and
/// `fail_fast_endpoints`.
pub(super) fn compile_failure_rules(f: &mut Fields<'_>) -> Result<FailureRules, ConfigError> {
    let fallback_timeout_ms = match f.opt_u64("fallback_timeout_ms", 3_600_000)? {
        Some(0) => return Err(f.error("fallback_timeout_ms", "must be greater than 0")),
        other => other,
    };
    let timeout_rules = compile_timeout_rules(f, fallback_timeout_ms.is_some())?;
    let max_targets = match f.opt_u64("max_targets_per_request", 1_000)? {
        Some(0) => return Err(f.error("max_targets_per_request", "must be at least 1")),
        other => other.map(|n| n as usize),
    };
    let mut fail_fast = Apis::default();
    for (path, value) in f.opt_array("fail_fast_endpoints")?.unwrap_or_default() {
        let api = value.as_str().and_then(Api::from_name).ok_or_else(|| {
            let known: Vec<&str> = Api::ALL.iter().map(|(_, n)| *n).collect();
            ConfigError::new(path, format!("expected one of: {}", known.join(", ")))
        })?;
        fail_fast.insert(api);
    }
    Ok(FailureRules {
        fallback_timeout_ms,
        max_targets,
        timeout_rules,
        fail_fast,
        budget: compile_budget(f)?,
    })
}

/// A time field from 1 ms to an hour, like `fallback_timeout_ms`.
fn positive_ms(f: &mut Fields<'_>, key: &'static str) -> Result<Option<u64>, ConfigError> {
    match f.opt_u64(key, 3_600_000)? {
        Some(0) => Err(f.error(key, "must be greater than 0")),
        other => Ok(other),
    }
}

/// `request_deadline_ms` and `fallback_if_failed_within_ms`. A `fallback_if_failed_within_ms`
/// at or past the deadline is refused: every failure the deadline lets through would be within
/// it, so it could never apply.
fn compile_budget(f: &mut Fields<'_>) -> Result<Budget, ConfigError> {
    let deadline_ms = positive_ms(f, "request_deadline_ms")?;
    let failed_within_ms = positive_ms(f, "fallback_if_failed_within_ms")?;
    if let (Some(deadline), Some(within)) = (deadline_ms, failed_within_ms) {
        if within >= deadline {
            let message = format!(
                "must be less than request_deadline_ms ({deadline}): no failure within the deadline could be slower"
            );
            return Err(f.error("fallback_if_failed_within_ms", message));
        }
    }
    Ok(Budget {
        deadline_ms,
        failed_within_ms,
    })
}

/// `fallback_timeout_growth`, `fallback_timeout_at_last` and `fallback_timeout_scope` (Zuplo
/// model load balancing, "Failures and retries": the retry model "starts over with twice the
/// time, and the request fails if that runs out too"; a response that doesn't stream is
/// bounded whole). Refused without `fallback_timeout_ms`, which they would silently not
/// change.
fn compile_timeout_rules(
    f: &mut Fields<'_>,
    has_timeout: bool,
) -> Result<TimeoutRules, ConfigError> {
    let mut rules = TimeoutRules::default();
    match f.opt_u64("fallback_timeout_growth", 10)? {
        Some(0) => return Err(f.error("fallback_timeout_growth", "must be from 1 to 10")),
        Some(growth) => rules.growth = growth as u32,
        None => {}
    }
    rules.at_last = match f.opt_str("fallback_timeout_at_last")? {
        None | Some("wait") => AtLast::Wait,
        Some("fail") => AtLast::Fail,
        Some(other) => {
            let message = format!("expected `wait` or `fail`, got `{other}`");
            return Err(f.error("fallback_timeout_at_last", message));
        }
    };
    rules.scope = match f.opt_str("fallback_timeout_scope")? {
        None | Some("whole_answer") => TimeoutScope::WholeAnswer,
        Some("answer_start") => TimeoutScope::AnswerStart,
        Some(other) => {
            let message = format!("expected `whole_answer` or `answer_start`, got `{other}`");
            return Err(f.error("fallback_timeout_scope", message));
        }
    };
    let needs_timeout = [
        "fallback_timeout_growth",
        "fallback_timeout_at_last",
        "fallback_timeout_scope",
    ];
    if let Some(field) = needs_timeout.iter().find(|k| !has_timeout && f.has(k)) {
        return Err(f.error(field, "has no effect without fallback_timeout_ms"));
    }
    Ok(rules)
}
