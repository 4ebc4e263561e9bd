//! The request-phase decision in one call: inspect the body, plan the targets, and build the
//! first attempt's outbound request.
//!
//! The adapter hands over the endpoint, the headers and the buffered body and gets back what
//! to do to the request: its cluster, authority, path, headers and body edits
//! ([`crate::core::outbound`]).

use crate::core::caller::Caller;
use crate::core::config::{Config, ModelId, Named};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::flight::{Replay, Start};
use crate::core::headers::Headers;
use crate::core::metadata::request_metadata;
use crate::core::outbound::{outbound, try_outbound, ClientRequest, Outbound, Unbuildable};
use crate::core::request::{inspect, inspect_multipart};
use crate::core::request::{raw_field, Layout};
use crate::core::responses::continuation::{self, Continuation};
use crate::core::responses::stored::{self, Storage};
use crate::core::routing::RoutingState;
use crate::core::routing::{plan, HealthInput, Plan, Request};

/// What to do with a request that will be forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'c> {
    /// The ordered targets; the first is where this attempt goes.
    pub plan: Plan,
    /// The target of this attempt.
    pub target: ModelId,
    /// This attempt's request, as changes to the client's.
    pub outbound: Outbound<'c>,
    /// Where the parts of the client's body sit, to rewrite it for other targets.
    pub layout: Layout,
    /// The client asked for a streamed (SSE) answer.
    pub stream: bool,
    /// It continues a conversation minted here: its origin failing is a 409, not a fallback.
    pub conversation: bool,
    /// The caller its answer's minted ids are bound to (`response_id_binding: "caller"`).
    pub caller: Option<Caller>,
    /// Every candidate was evicted: the shortest eviction time left.
    pub evicted_for_ms: Option<u64>,
}

impl<'c> Decision<'c> {
    /// The flight of the request: how it starts, and what it keeps for another attempt (the
    /// client's headers and body as sent); with the first attempt's request and target, to
    /// write into the request the router sends.
    pub fn into_flight(
        self,
        endpoint: Endpoint,
        headers: Headers,
        body: Vec<u8>,
    ) -> ((Start, Replay), (Outbound<'c>, ModelId)) {
        let start = Start {
            caller: self.caller,
            evicted_for_ms: self.evicted_for_ms,
            ..Start::routed(endpoint, self.plan, self.stream, self.conversation)
        };
        let replay = Replay {
            endpoint,
            headers,
            body,
            layout: self.layout,
            stored_path: None,
        };
        ((start, replay), (self.outbound, self.target))
    }
}

/// Reads a request body the way its endpoint sends it: JSON, or a multipart upload.
fn inspect_request<'b>(
    endpoint: Endpoint,
    body: &'b [u8],
    headers: &Headers,
) -> Result<crate::core::request::Inspected<'b>, ErrorReply> {
    if endpoint.is_multipart() {
        let content_type = headers.get_str("content-type").unwrap_or_default();
        match crate::core::multipart::boundary(content_type) {
            Ok(Some(boundary)) => inspect_multipart(body, boundary),
            Ok(None) => Err(ErrorReply::invalid_multipart(
                "no multipart/form-data content type with a boundary",
            )),
            Err(malformed) => Err(ErrorReply::invalid_multipart(&malformed.to_string())),
        }
    } else {
        inspect(body)
    }
}

/// A call to a complexity virtual model's classifier model, to make before deciding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifierCall {
    /// The classifier model.
    pub model: ModelId,
    /// The request as a client would send it to `/v1/chat/completions` at this gateway: its
    /// outbound request ([`ClassifierCall::outbound`]) gives the model's own host and path.
    pub headers: Headers,
    /// The chat completion asking for the tier, already naming the model's upstream id.
    pub body: Vec<u8>,
    /// How long to wait before the heuristic decides.
    pub timeout_ms: u64,
}

impl ClassifierCall {
    /// The call's outbound request: the model's cluster, authority, path and headers.
    pub fn outbound<'c>(&self, config: &'c Config) -> Option<Outbound<'c>> {
        let client = ClientRequest {
            endpoint: Endpoint::ChatCompletions,
            headers: &self.headers,
            body: None,
            stored_path: None,
        };
        outbound(config, None, self.model, &client)
    }
}

/// The classifier call a request needs first, if it goes to a complexity virtual model with a
/// classifier model (and is valid; errors are left for [`decide`] to report).
pub fn classifier_call(
    config: &Config,
    endpoint: Endpoint,
    body: &[u8],
    headers: &Headers,
) -> Option<ClassifierCall> {
    // Every routed request asks; only configs with a classifier pay a second look at the body.
    if !config.has_classifier {
        return None;
    }
    let inspected = inspect_request(endpoint, body, headers).ok()?;
    let Some(crate::core::config::Named::Virtual(_, vm)) = config.lookup(&inspected.model) else {
        return None;
    };
    let crate::core::config::Routing::Complexity {
        classifier: Some(c),
        ..
    } = &vm.routing
    else {
        return None;
    };
    let model = config.model(c.model)?;
    let field = |name: &str| raw_field(body, &inspected.fields, name);
    let (text, _) = crate::core::conversation::all_text(field);
    // Only the gateway's own authority is taken from the client: the rest of its headers
    // (its credentials above all) are not for the classifier.
    let authority = headers.get(":authority").unwrap_or(b"switchboard");
    let request = Headers::from_pairs([
        (&b":method"[..], &b"POST"[..]),
        (
            b":path",
            Endpoint::ChatCompletions.display_path().as_bytes(),
        ),
        (b":authority", authority),
        (b"content-type", b"application/json"),
    ]);
    Some(ClassifierCall {
        model: c.model,
        headers: request,
        body: crate::core::routing::classifier::request_body(model, &text),
        timeout_ms: c.timeout_ms,
    })
}

/// Decides where a buffered request goes and how its body must change for that target.
pub fn decide<'c>(
    config: &'c Config,
    endpoint: Endpoint,
    body: &[u8],
    headers: &Headers,
    health: &HealthInput<'_>,
    state: &dyn RoutingState,
    rng: &mut fastrand::Rng,
) -> Result<Decision<'c>, ErrorReply> {
    decide_with_tier(config, endpoint, body, headers, health, state, None, rng)
}

/// [`decide`], with the classifier model's tier for a complexity virtual model.
// The inputs are independent values of one decision; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub fn decide_with_tier<'c>(
    config: &'c Config,
    endpoint: Endpoint,
    body: &[u8],
    headers: &Headers,
    health: &HealthInput<'_>,
    state: &dyn RoutingState,
    tier_hint: Option<crate::core::config::Tier>,
    rng: &mut fastrand::Rng,
) -> Result<Decision<'c>, ErrorReply> {
    let inspected = inspect_request(endpoint, body, headers)?;
    // A Responses turn that continues a conversation goes to its origin. Its ids are checked
    // first: one that looks like ours but does not decode is a 409 whatever else is wrong.
    let continuation = match endpoint {
        Endpoint::Responses => continuation::read(&config.response_keys, body, &inspected.fields)?,
        _ => Continuation::default(),
    };
    let metadata = request_metadata(config, headers)?;
    let request = Request {
        endpoint,
        model: &inspected.model,
        metadata: &metadata,
        headers,
        state,
        body,
        fields: &inspected.fields,
        tier_hint,
    };
    let mut plan = plan_request(config, &request, &continuation, health, rng)?;
    plan.pinned |= endpoint.single_target();
    let target = plan
        .primary()
        .ok_or_else(|| ErrorReply::no_target_available(&inspected.model))?;
    let overrides_anywhere = plan
        .virtual_model(config)
        .is_some_and(|vm| vm.targets.iter().any(|t| !t.override_params.is_empty()));
    let mut layout = inspected.layout(overrides_anywhere);
    layout.extra = continuation.edits;
    let client = ClientRequest {
        endpoint,
        headers,
        body: Some((body, &layout)),
        stored_path: None,
    };
    // The first target's request decides the reply when it cannot be translated: a 400 naming
    // the field. A later target's that cannot be built counts as a refused attempt instead
    // (flight::Machine's dispatch), and the plan moves on.
    let outbound =
        try_outbound(config, plan.virtual_model(config), target, &client).map_err(|e| match e {
            Unbuildable::Untranslatable(u) => ErrorReply::untranslatable(&u.field, &u.reason),
            Unbuildable::Rewrite => ErrorReply::invalid_json("could not rewrite the body"),
        })?;
    let binds = config.bind_ids_to_caller && endpoint == Endpoint::Responses;
    let caller = binds.then(|| request.caller(&config.caller_identity));
    let evicted_for_ms = health.evicted_for_ms(plan.virtual_model(config), &plan.candidates);
    Ok(Decision {
        caller,
        evicted_for_ms,
        plan,
        target,
        outbound,
        layout,
        stream: inspected.stream,
        conversation: continuation.origin.is_some(),
    })
}

/// The plan of a request: a continued conversation pinned to its origin, a Responses request
/// to a virtual model by its storage rules (Zuplo model load balancing, "Stored responses"),
/// anything else by its strategy.
fn plan_request(
    config: &Config,
    request: &Request<'_>,
    continuation: &Continuation,
    health: &HealthInput<'_>,
    rng: &mut fastrand::Rng,
) -> Result<Plan, ErrorReply> {
    let (endpoint, body, fields) = (request.endpoint, request.body, request.fields);
    match (&continuation.origin, endpoint, config.lookup(request.model)) {
        (Some(origin), _, _) => continuation::pinned_plan(config, request, origin),
        (None, Endpoint::Responses, Some(Named::Virtual(index, vm))) => {
            let storage = if continuation.raw_stored {
                Storage::Held
            } else if raw_field(body, fields, "store").is_some_and(|v| v.get() == "false") {
                Storage::Stateless
            } else {
                Storage::Stores
            };
            stored::plan(config, index, vm, request, storage, health, rng)
        }
        _ => plan(config, request, health, rng),
    }
}

/// Where a retrieve, input-items list, cancel or delete of a raw provider response id goes,
/// among the targets of virtual model `index` (Zuplo model load balancing, "Stored
/// responses"); such a request has no body, so only its headers and metadata count.
pub fn decide_stored_path(
    config: &Config,
    index: usize,
    headers: &Headers,
    health: &HealthInput<'_>,
    state: &dyn RoutingState,
    rng: &mut fastrand::Rng,
) -> Result<ModelId, ErrorReply> {
    let vm = config
        .virtual_models
        .get(index)
        .ok_or_else(|| ErrorReply::no_target_available("the stored response's model"))?;
    let metadata = request_metadata(config, headers)?;
    let request = Request {
        endpoint: Endpoint::Responses,
        model: &vm.name,
        metadata: &metadata,
        headers,
        state,
        body: &[],
        fields: &[],
        tier_hint: None,
    };
    let planned = stored::plan(config, index, vm, &request, Storage::Held, health, rng)?;
    planned
        .primary()
        .ok_or_else(|| ErrorReply::no_target_available(&vm.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Tier;
    use crate::core::headers::NO_HEADERS;
    use crate::core::routing::LocalState;

    const CONFIG: &str = r#"{
      "models": [
        {"name": "openai/gpt-4o", "cluster": "c1", "model": "gpt-4o", "visibility": "internal"},
        {"name": "gpt-4o", "cluster": "c2", "model": "gpt-4o", "visibility": "public"}
      ],
      "virtual_models": [
        {"name": "chat", "model_types": ["chat"],
         "routing_config": {"type": "weight-based-routing", "load_balance_targets": [
           {"target": "openai/gpt-4o", "weight": 100}]}}
      ]
    }"#;

    fn config() -> Config {
        Config::parse(CONFIG.as_bytes()).unwrap()
    }

    #[test]
    fn rewrites_virtual_model_to_target_upstream_model() {
        let body = br#"{"model": "chat", "messages": [{"role":"user","content":"hi"}]}"#;
        let config = config();
        let d = decide(
            &config,
            Endpoint::ChatCompletions,
            body,
            &NO_HEADERS,
            &HealthInput::NONE,
            &LocalState::default(),
            &mut fastrand::Rng::with_seed(1),
        )
        .unwrap();
        assert_eq!(d.target, ModelId(0));
        assert_eq!(
            d.outbound.edits.unwrap().apply(body).unwrap(),
            br#"{"model": "gpt-4o", "messages": [{"role":"user","content":"hi"}]}"#
        );
    }

    #[test]
    fn leaves_body_alone_when_model_already_matches() {
        let body = br#"{"model":"gpt-4o"}"#;
        let config = config();
        let d = decide(
            &config,
            Endpoint::ChatCompletions,
            body,
            &NO_HEADERS,
            &HealthInput::NONE,
            &LocalState::default(),
            &mut fastrand::Rng::with_seed(1),
        )
        .unwrap();
        assert_eq!(d.target, ModelId(1));
        assert_eq!(d.outbound.edits, None);
        assert!(d.outbound.remove.is_empty());
    }

    #[test]
    fn override_params_and_metadata_apply_per_target() {
        let config = Config::parse(
            br#"{"models": [{"name": "t", "cluster": "c", "model": "gpt-4o"}],
              "default_metadata": {"env": "prod"},
              "virtual_models": [{"name": "vm", "model_types": ["chat"], "routing_config": {
                "type": "weight-based-routing", "load_balance_targets": [
                  {"target": "t", "weight": 100, "metadata_match": {"env": "prod"},
                   "override_params": {"temperature": 0.1, "max_tokens": 50}}]}}]}"#,
        )
        .unwrap();
        let body = br#"{"model":"vm","temperature":1}"#;
        let headers = Headers::from_pairs([("x-switchboard-metadata", r#"{"env":"dev"}"#)]);
        let d = decide(
            &config,
            Endpoint::ChatCompletions,
            body,
            &headers,
            &HealthInput::NONE,
            &LocalState::default(),
            &mut fastrand::Rng::with_seed(1),
        )
        .unwrap();
        // The metadata header is for routing, not for the provider.
        assert_eq!(d.outbound.remove, ["x-switchboard-metadata"]);
        // The default metadata wins over the header's value, so the target matches.
        assert_eq!(
            d.outbound.edits.unwrap().apply(body).unwrap(),
            br#"{"model":"gpt-4o","temperature":0.1,"max_tokens":50}"#
        );
        let bad = Headers::from_pairs([("x-switchboard-metadata", "not json")]);
        let e = decide(
            &config,
            Endpoint::ChatCompletions,
            body,
            &bad,
            &HealthInput::NONE,
            &LocalState::default(),
            &mut fastrand::Rng::with_seed(1),
        )
        .unwrap_err();
        assert_eq!(e.status, 400);
    }

    #[test]
    fn multipart_uploads_get_the_bare_model_name_rewritten_in_their_form_field() {
        let config = Config::parse(
            br#"{"models": [{"name": "t", "cluster": "c", "model": "whisper-1"}],
              "virtual_models": [{"name": "team/stt", "model_types": ["audio_transcription"], "routing_config": {
                "type": "weight-based-routing", "load_balance_targets": [
                  {"target": "t", "weight": 100, "override_params": {"temperature": 0}}]}}]}"#,
        )
        .unwrap();
        let body = b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nteam/stt\r\n--b--\r\n";
        let headers = Headers::from_pairs([("content-type", "multipart/form-data; boundary=b")]);
        let state = LocalState::default();
        let d = decide(
            &config,
            Endpoint::Transcriptions,
            body,
            &headers,
            &HealthInput::NONE,
            &state,
            &mut fastrand::Rng::with_seed(1),
        )
        .unwrap();
        let expected = String::from_utf8_lossy(body).replace("team/stt", "whisper-1");
        assert_eq!(
            String::from_utf8(d.outbound.edits.unwrap().apply(body).unwrap()).unwrap(),
            expected
        );
        let json = Headers::from_pairs([("content-type", "application/json")]);
        let e = decide(
            &config,
            Endpoint::Transcriptions,
            br#"{"model":"team/stt"}"#,
            &json,
            &HealthInput::NONE,
            &state,
            &mut fastrand::Rng::with_seed(1),
        )
        .unwrap_err();
        assert_eq!(e.status, 400);
    }

    #[test]
    fn only_a_complexity_model_with_a_classifier_needs_a_classifier_call() {
        assert!(!config().has_classifier);
        assert_eq!(
            classifier_call(
                &config(),
                Endpoint::ChatCompletions,
                br#"{"model":"chat"}"#,
                &NO_HEADERS
            ),
            None
        );
        let with = Config::parse(
            br#"{"models": [{"name": "t", "cluster": "c", "model": "m"}, {"name": "judge", "cluster": "j", "model": "small"}],
              "virtual_models": [{"name": "auto", "model_types": ["chat"], "routing_config": {
                "type": "complexity-based-routing", "complexity": {"classifier_model": "judge"},
                "load_balance_targets": [{"target": "t", "tier": "simple"}]}}]}"#,
        )
        .unwrap();
        assert!(with.has_classifier);
        let call = classifier_call(
            &with,
            Endpoint::ChatCompletions,
            br#"{"model":"auto","messages":[{"role":"user","content":"hi"}]}"#,
            &NO_HEADERS,
        )
        .unwrap();
        assert_eq!(call.outbound(&with).unwrap().cluster, "j");
        assert_eq!(
            classifier_call(
                &with,
                Endpoint::ChatCompletions,
                br#"{"model":"t"}"#,
                &NO_HEADERS
            ),
            None
        );
    }

    #[test]
    fn the_classifier_tier_decides_over_the_text() {
        let config = Config::parse(
            br#"{"models": [{"name": "small", "cluster": "s", "model": "s"}, {"name": "big", "cluster": "b", "model": "b"}],
              "virtual_models": [{"name": "auto", "model_types": ["chat"], "routing_config": {
                "type": "complexity-based-routing", "load_balance_targets": [
                  {"target": "small", "tier": "simple"}, {"target": "big", "tier": "complex"}]}}]}"#,
        )
        .unwrap();
        // A greeting: the heuristic calls it simple.
        let body = br#"{"model":"auto","messages":[{"role":"user","content":"hi"}]}"#;
        let target = |tier| {
            decide_with_tier(
                &config,
                Endpoint::ChatCompletions,
                body,
                &NO_HEADERS,
                &HealthInput::NONE,
                &LocalState::default(),
                tier,
                &mut fastrand::Rng::with_seed(1),
            )
            .unwrap()
            .target
        };
        assert_eq!(target(None), ModelId(0));
        assert_eq!(target(Some(Tier::Complex)), ModelId(1));
    }

    #[test]
    fn client_errors_come_back_as_replies() {
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            decide(
                &config(),
                Endpoint::ChatCompletions,
                b"{",
                &NO_HEADERS,
                &HealthInput::NONE,
                &LocalState::default(),
                &mut rng
            )
            .unwrap_err()
            .status,
            400
        );
        assert_eq!(
            decide(
                &config(),
                Endpoint::ChatCompletions,
                br#"{"model":"x"}"#,
                &NO_HEADERS,
                &HealthInput::NONE,
                &LocalState::default(),
                &mut rng
            )
            .unwrap_err()
            .status,
            404
        );
        assert_eq!(
            decide(
                &config(),
                Endpoint::Embeddings,
                br#"{"model":"chat"}"#,
                &NO_HEADERS,
                &HealthInput::NONE,
                &LocalState::default(),
                &mut rng
            )
            .unwrap_err()
            .status,
            400
        );
    }
}
