//! A `/v1/responses` target that does not serve the Responses API natively.
//!
//! TrueFoundry virtual models, "Responses API conversations": every target of a virtual model
//! called on `/responses` must support the Responses API natively, because translating the
//! request into a chat completion would lose conversation state, "so the AI Gateway rejects
//! it rather than falling back"; its error table: "`400` — A target does not support the
//! Responses API natively … This error is terminal — the AI Gateway does not fall back."
//!
//! Read here as: such a target stays in the virtual model's list and load balancing treats it
//! like any other; when routing picks it for a request (the first candidate, after the
//! strategy and health), the request gets that 400 instead of being sent to another target.
//! Since the 400 is terminal, a fallback chain ends where it would reach such a target: the
//! targets behind it are not tried, and the client gets the last answer. The 400 itself is
//! answered when the request is routed, before any attempt.
//!
//! `non_native_responses: "skip"` leaves such targets out instead, as every other endpoint
//! does (Zuplo model load balancing, "How it works": models that can't serve the request's
//! endpoint are dropped), so another target serves the request.

use crate::core::config::{Config, ModelId, NonNativeResponses, VirtualModel};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;

use super::request::Request;

/// Whether targets that do not serve `endpoint` natively stay among a request's targets, to
/// be refused when picked: only on `/v1/responses` under `"reject"`.
pub fn keeps_non_native(endpoint: Endpoint, mode: NonNativeResponses) -> bool {
    endpoint == Endpoint::Responses && mode == NonNativeResponses::Reject
}

/// The 400 when the first candidate does not serve the Responses API natively; otherwise the
/// candidates end before the first one that does not (the 400 there would be terminal).
pub fn refuse_or_cut(
    config: &Config,
    vm: &VirtualModel,
    request: &Request<'_>,
    candidates: &mut Vec<ModelId>,
) -> Result<(), ErrorReply> {
    if !keeps_non_native(request.endpoint, config.non_native_responses) {
        return Ok(());
    }
    let native = |m: &ModelId| {
        config
            .model(*m)
            .is_some_and(|model| request.endpoint.served_by(model.apis))
    };
    match candidates.iter().position(|m| !native(m)) {
        Some(0) => {
            let target = candidates
                .first()
                .and_then(|m| config.model(*m))
                .map_or("a target", |m| m.name.as_str());
            Err(ErrorReply::target_not_native(
                &vm.name,
                target,
                request.endpoint.display_path(),
            ))
        }
        Some(cut) => {
            candidates.truncate(cut);
            Ok(())
        }
        None => Ok(()),
    }
}

/// Whether a plan of `len` candidates ended before reaching `max_targets_per_request` because
/// a target that does not serve the Responses API natively stood next ([`refuse_or_cut`]).
pub fn cut_short(config: &Config, vm: &VirtualModel, request: &Request<'_>, len: usize) -> bool {
    let non_native = |m: ModelId| {
        config
            .model(m)
            .is_some_and(|model| !request.endpoint.served_by(model.apis))
    };
    keeps_non_native(request.endpoint, config.non_native_responses)
        && vm.targets.iter().any(|t| non_native(t.model))
        && vm.max_targets.is_none_or(|n| len < n)
}

#[cfg(test)]
mod tests {
    use crate::core::config::{Config, ModelId};
    use crate::core::endpoint::Endpoint;
    use crate::core::headers::NO_HEADERS;
    use crate::core::metadata::Metadata;
    use crate::core::routing::LocalState;
    use crate::core::routing::{plan, HealthInput, Request};

    /// `claude` (Anthropic: Messages and chat completions) and `vllm` (OpenAI-compatible) do
    /// not serve the Responses API; `gpt-a` and `gpt-b` do.
    fn config(extra: &str) -> Config {
        let json = format!(
            r#"{{"models": [
              {{"name": "gpt-a", "cluster": "a", "model": "gpt-4o"}},
              {{"name": "claude", "cluster": "c", "model": "claude", "provider": "anthropic"}},
              {{"name": "gpt-b", "cluster": "b", "model": "gpt-4o"}},
              {{"name": "vllm", "cluster": "v", "model": "llama", "provider": "openai-compatible"}}],
              {extra}
              "virtual_models": [
                {{"name": "claude-first", "model_types": ["responses", "chat"], "routing_config": {{
                  "type": "priority-based-routing", "load_balance_targets": [
                    {{"target": "claude", "priority": 0}}, {{"target": "gpt-a", "priority": 1}}]}}}},
                {{"name": "chain", "model_types": ["responses"], "routing_config": {{
                  "type": "priority-based-routing", "load_balance_targets": [
                    {{"target": "gpt-a", "priority": 0}}, {{"target": "vllm", "priority": 1}},
                    {{"target": "gpt-b", "priority": 2}}]}}}},
                {{"name": "spread", "model_types": ["responses"], "routing_config": {{
                  "type": "round-robin-routing", "load_balance_targets": [
                    {{"target": "gpt-a"}}, {{"target": "claude"}}]}}}},
                {{"name": "none", "model_types": ["responses"], "routing_config": {{
                  "type": "round-robin-routing", "load_balance_targets": [
                    {{"target": "claude"}}, {{"target": "vllm"}}]}}}}]}}"#
        );
        Config::parse(json.as_bytes()).unwrap()
    }

    fn route(
        c: &Config,
        endpoint: Endpoint,
        model: &str,
        state: &LocalState,
        seed: u64,
    ) -> Result<Vec<ModelId>, (u16, String)> {
        let metadata = Metadata::default();
        let r = Request {
            endpoint,
            model,
            metadata: &metadata,
            headers: &NO_HEADERS,
            state,
            body: b"",
            fields: &[],
            tier_hint: None,
        };
        plan(
            c,
            &r,
            &HealthInput::NONE,
            &mut fastrand::Rng::with_seed(seed),
        )
        .map(|p| p.candidates)
        .map_err(|e| (e.status, e.body))
    }

    #[test]
    fn a_responses_request_routed_to_a_target_that_is_not_native_gets_400() {
        let c = config("");
        let state = LocalState::default();
        let (status, body) = route(&c, Endpoint::Responses, "claude-first", &state, 1).unwrap_err();
        assert_eq!(status, 400);
        assert!(body.contains(r#""code":"unsupported_endpoint""#), "{body}");
        assert!(
            body.contains("`claude-first` routed this request to `claude`"),
            "{body}"
        );
        // Other endpoints keep dropping the targets that cannot serve them.
        assert_eq!(
            route(&c, Endpoint::Messages, "claude-first", &state, 1).unwrap(),
            [ModelId(1)]
        );
        // Round robin: every other request picks claude and gets the 400; the rest go to gpt-a
        // with no fallback to claude behind it.
        let outcomes: Vec<_> = (0..6)
            .map(|seed| route(&c, Endpoint::Responses, "spread", &state, seed))
            .collect();
        assert_eq!(outcomes.iter().filter(|o| o.is_err()).count(), 3);
        for o in outcomes.iter().flatten() {
            assert_eq!(o, &[ModelId(0)]);
        }
        // No target native at all: the endpoint's own 400.
        let (status, body) = route(&c, Endpoint::Responses, "none", &state, 1).unwrap_err();
        assert_eq!(status, 400);
        assert!(body.contains("No target of `none` serves"), "{body}");
    }

    #[test]
    fn the_fallback_chain_ends_where_it_would_reach_a_target_that_is_not_native() {
        let c = config("");
        let state = LocalState::default();
        assert_eq!(
            route(&c, Endpoint::Responses, "chain", &state, 1).unwrap(),
            [ModelId(0)],
            "gpt-b stands behind vllm: never tried"
        );
    }

    #[test]
    fn non_native_responses_skip_leaves_such_targets_out() {
        let c = config(r#""non_native_responses": "skip","#);
        let state = LocalState::default();
        for seed in 0..6 {
            assert_eq!(
                route(&c, Endpoint::Responses, "claude-first", &state, seed).unwrap(),
                [ModelId(0)]
            );
            assert_eq!(
                route(&c, Endpoint::Responses, "spread", &state, seed).unwrap(),
                [ModelId(0)]
            );
        }
        assert_eq!(
            route(&c, Endpoint::Responses, "chain", &state, 1).unwrap(),
            [ModelId(0), ModelId(2)]
        );
    }
}
