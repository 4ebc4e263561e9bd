//! What happens to a request as its headers arrive, before any body: answer the model list,
//! refuse, let it pass, hold it for its body, hold batch input for a check, or route a
//! stored-response request at once. The host-neutral half of the request phase, shared by
//! every adapter; the body half is [`crate::core::decision`].

use crate::core::batch;
use crate::core::config::{Config, HeaderNames, ModelId};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::flight::{Replay, Start};
use crate::core::headers::Headers;
use crate::core::outbound::{outbound, ClientRequest, Outbound};
use crate::core::request::{check_content_encoding, Layout};
use crate::core::responses::continuation::{is_plain_token, stored_origin, stored_path};
use crate::core::responses::id::PREFIX;
use crate::core::routing::RoutingState;

/// What to do with a request whose headers just arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission<'c> {
    /// Not Switchboard's: let it through (the stream machine removed a client's cluster header
    /// before admitting any request).
    Pass,
    /// Answer `GET /v1/models` with this JSON: the names clients may call.
    ModelList(&'c str),
    /// Answer with this error (in Anthropic's shape when `endpoint` speaks it).
    Refuse {
        /// The error.
        error: ErrorReply,
        /// The endpoint called, if it is an LLM endpoint.
        endpoint: Option<Endpoint>,
    },
    /// An LLM request: hold its headers until the whole body is in.
    Inspect(Endpoint),
    /// Batch input: hold it to check it names no virtual model ([`batch::check`]).
    CheckBatch {
        /// The path.
        path: String,
        /// Its content type.
        content_type: String,
    },
    /// A retrieve, input-items list, cancel or delete of a stored response: route it now
    /// with [`route_stored`].
    Stored(StoredPath),
}

impl Admission<'_> {
    /// The trace token to remove from a request that goes on now or after a check
    /// (pass-through, batch input): it never goes upstream. Only one the client sent, so most
    /// requests make no host call for it. (A routed request's headers come from its outbound
    /// request instead.)
    pub fn trace_token_to_strip<'n>(
        &self,
        names: &'n HeaderNames,
        headers: &Headers,
    ) -> Option<&'n str> {
        let goes_on = matches!(self, Admission::Pass | Admission::CheckBatch { .. });
        let sent = headers.get(&names.trace_token).is_some();
        (goes_on && sent).then_some(names.trace_token.as_str())
    }
}

/// A stored-response path, with the part after its id (`""`, `/input_items`, `/cancel`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredPath {
    /// An id Switchboard minted: it names its origin.
    Minted {
        /// The minted id.
        id: String,
        /// The part after it.
        suffix: &'static str,
    },
    /// A raw provider id, routed among the targets of virtual model `index`
    /// (`stored_responses_virtual_model`).
    Raw {
        /// The virtual model.
        index: usize,
        /// The provider's id (a plain token).
        id: String,
        /// The part after it.
        suffix: &'static str,
    },
}

/// Decides what happens to a request from its headers (`end_of_stream`: it has no body).
pub fn admit<'c>(config: &'c Config, headers: &Headers, end_of_stream: bool) -> Admission<'c> {
    let path = headers.get_str(":path").unwrap_or_default();
    let method = headers.get_str(":method").unwrap_or_default();
    if method == "GET" && matches!(path.split('?').next(), Some("/v1/models" | "/models")) {
        return Admission::ModelList(&config.models_list_json);
    }
    if let Some((id, suffix)) = stored_path(path) {
        if id.starts_with(PREFIX) {
            let id = id.to_string();
            return Admission::Stored(StoredPath::Minted { id, suffix });
        }
        if let Some(index) = config.stored_responses_virtual_model {
            // Ids other than plain tokens are not routed, so the path cannot be bent.
            if !is_plain_token(id) {
                return Admission::Pass;
            }
            let id = id.to_string();
            return Admission::Stored(StoredPath::Raw { index, id, suffix });
        }
    }
    let Some(endpoint) = Endpoint::from_path(path).filter(|_| method == "POST") else {
        let batch = method == "POST"
            && !end_of_stream
            && !config.virtual_models.is_empty()
            && batch::is_batch_path(path);
        if batch {
            let content_type = headers.get_str("content-type").unwrap_or_default();
            return Admission::CheckBatch {
                path: path.to_string(),
                content_type: content_type.to_string(),
            };
        }
        return Admission::Pass;
    };
    let refuse = |error| Admission::Refuse {
        error,
        endpoint: Some(endpoint),
    };
    if end_of_stream {
        return refuse(ErrorReply::body_required());
    }
    if let Err(error) = check_content_encoding(headers) {
        return refuse(error);
    }
    // u64: a `usize` is 32 bits in the .wasm, where a length past 4 GiB would not parse and
    // so would not be refused here.
    let declared = headers
        .get_str("content-length")
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > config.max_request_body_bytes as u64) {
        return refuse(ErrorReply::body_too_large(config.max_request_body_bytes));
    }
    Admission::Inspect(endpoint)
}

/// A stored-response request, routed: where it goes and how its flight starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRoute<'c> {
    /// The target holding the response.
    pub target: ModelId,
    /// Its request, as changes to the client's (the provider's id in the path).
    pub outbound: Outbound<'c>,
    /// Its flight: retries at the target, no fallback; a minted id's answer gets minted ids.
    pub start: Start,
    /// The path after the version prefix, with the provider's id.
    pub stored_path: String,
}

impl StoredRoute<'_> {
    /// What the flight keeps for a retry: the client's headers, and no body.
    pub fn replay(&self, headers: Headers) -> Replay {
        Replay {
            endpoint: Endpoint::Responses,
            headers,
            body: Vec::new(),
            layout: Layout::default(),
            stored_path: Some(self.stored_path.clone()),
        }
    }
}

/// Routes a stored-response request: a minted id only to the target that stored it, with the
/// provider's id in the path (TrueFoundry virtual models, "Responses API conversations"); a
/// raw id to the target `pick` chooses among the virtual model's (Zuplo model load balancing,
/// "Stored responses"; `pick` is [`crate::core::decision::decide_stored_path`] with the
/// adapter's health view).
pub fn route_stored<'c>(
    config: &'c Config,
    headers: &Headers,
    path: &StoredPath,
    state: &dyn RoutingState,
    pick: impl FnOnce(usize) -> Result<ModelId, ErrorReply>,
) -> Result<StoredRoute<'c>, ErrorReply> {
    let (index, target, stored, minted) = match path {
        StoredPath::Minted { id, suffix } => {
            let (index, target, origin) = stored_origin(config, id, headers, state)?;
            let stored = format!("/responses/{}{suffix}", origin.provider_id);
            (index, target, stored, Some(origin.caller))
        }
        StoredPath::Raw { index, id, suffix } => {
            let target = pick(*index)?;
            (*index, target, format!("/responses/{id}{suffix}"), None)
        }
    };
    let client = ClientRequest {
        endpoint: Endpoint::Responses,
        headers,
        body: None,
        stored_path: Some(&stored),
    };
    let outbound = outbound(config, config.virtual_models.get(index), target, &client)
        .ok_or_else(|| ErrorReply::no_target_available("the stored response's model"))?;
    // The ids of a minted id's answer are bound to the caller its id was (the request's own,
    // as `stored_origin` checked).
    let start = Start {
        caller: minted.flatten(),
        ..Start::stored(index, target, minted.is_some())
    };
    Ok(StoredRoute {
        target,
        outbound,
        start,
        stored_path: stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::routing::LocalState;

    const CONFIG: &str = r#"{"models": [{"name": "t", "cluster": "c", "model": "m",
        "authority": "api.example"}],
      "stored_responses_virtual_model": "vm",
      "virtual_models": [{"name": "vm", "model_types": ["chat", "responses"], "routing_config": {
        "type": "weight-based-routing", "load_balance_targets": [{"target": "t", "weight": 100}]}}]}"#;

    fn config() -> Config {
        Config::parse(CONFIG.as_bytes()).unwrap()
    }

    fn request(method: &str, path: &str, extra: &[(&str, &str)]) -> Headers {
        let mut pairs = vec![(":method", method), (":path", path)];
        pairs.extend_from_slice(extra);
        Headers::from_pairs(pairs)
    }

    #[test]
    fn the_model_list_is_answered_for_get_only() {
        let c = config();
        let a = admit(&c, &request("GET", "/v1/models?x=1", &[]), true);
        assert_eq!(a, Admission::ModelList(c.models_list_json.as_str()));
        assert!(matches!(
            admit(&c, &request("POST", "/v1/models", &[]), true),
            Admission::Pass
        ));
    }

    #[test]
    fn an_llm_request_is_held_for_its_body_unless_it_cannot_be_read() {
        let c = config();
        let chat = "/v1/chat/completions";
        assert_eq!(
            admit(&c, &request("POST", chat, &[]), false),
            Admission::Inspect(Endpoint::ChatCompletions)
        );
        let refused = |h: &Headers, end| match admit(&c, h, end) {
            Admission::Refuse { error, endpoint } => (error.status, endpoint),
            other => panic!("{other:?}"),
        };
        let some = Some(Endpoint::ChatCompletions);
        assert_eq!(refused(&request("POST", chat, &[]), true), (400, some));
        let gzip = request("POST", chat, &[("content-encoding", "gzip")]);
        assert_eq!(refused(&gzip, false), (415, some));
        let big = request("POST", chat, &[("content-length", "999999999999")]);
        assert_eq!(refused(&big, false), (413, some));
        let messages = request("POST", "/v1/messages", &[]);
        assert_eq!(refused(&messages, true).1, Some(Endpoint::Messages));
    }

    #[test]
    fn other_requests_pass() {
        let c = config();
        let chosen = [("x-switchboard-cluster", "secret")];
        assert_eq!(
            admit(&c, &request("GET", "/v1/chat/completions", &chosen), true),
            Admission::Pass
        );
        assert_eq!(
            admit(&c, &request("GET", "/healthz", &[]), true),
            Admission::Pass
        );
        let files = request(
            "POST",
            "/v1/files",
            &[("content-type", "multipart/form-data")],
        );
        assert_eq!(
            admit(&c, &files, false),
            Admission::CheckBatch {
                path: "/v1/files".into(),
                content_type: "multipart/form-data".into()
            }
        );
    }

    #[test]
    fn only_requests_let_through_lose_the_trace_token_they_sent() {
        let c = config();
        let names = &c.header_names;
        let strip = |method, path, extra: &[(&str, &str)], end| {
            let h = request(method, path, extra);
            admit(&c, &h, end).trace_token_to_strip(names, &h)
        };
        let token = [(names.trace_token.as_str(), "t")];
        let stripped = Some(names.trace_token.as_str());
        assert_eq!(strip("GET", "/healthz", &token, true), stripped);
        assert_eq!(
            strip("POST", "/v1/files", &token, false),
            stripped,
            "batch input"
        );
        assert_eq!(strip("GET", "/healthz", &[], true), None);
        // Routed requests get their headers from the outbound request instead.
        let chat = "/v1/chat/completions";
        assert_eq!(strip("POST", chat, &token, false), None);
    }

    #[test]
    fn stored_response_paths_are_routed_by_their_id() {
        let c = config();
        let minted = format!("/v1/responses/{PREFIX}abc/input_items");
        assert_eq!(
            admit(&c, &request("GET", &minted, &[]), true),
            Admission::Stored(StoredPath::Minted {
                id: format!("{PREFIX}abc"),
                suffix: "/input_items"
            })
        );
        let raw = StoredPath::Raw {
            index: 0,
            id: "resp_123".into(),
            suffix: "",
        };
        // Without the version prefix: the provider's path gets it.
        let headers = request("DELETE", "/responses/resp_123", &[]);
        assert_eq!(admit(&c, &headers, true), Admission::Stored(raw.clone()));
        // A raw id that is not a plain token is not routed.
        let bent = request("GET", "/v1/responses/..%2Fadmin", &[]);
        assert!(matches!(admit(&c, &bent, true), Admission::Pass { .. }));

        let route = route_stored(&c, &headers, &raw, &LocalState::default(), |index| {
            assert_eq!(index, 0);
            Ok(ModelId(0))
        })
        .unwrap();
        assert_eq!(route.outbound.cluster, "c");
        assert_eq!(route.outbound.authority, Some("api.example"));
        assert_eq!(
            route.outbound.path.as_deref(),
            Some("/v1/responses/resp_123")
        );
        assert_eq!(route.start, Start::stored(0, ModelId(0), false));
        assert_eq!(
            route.replay(headers).stored_path.as_deref(),
            Some("/responses/resp_123")
        );
        // A minted id that does not decode is a 409, whatever else.
        let bad = StoredPath::Minted {
            id: format!("{PREFIX}abc"),
            suffix: "",
        };
        let e = route_stored(
            &c,
            &request("GET", "/", &[]),
            &bad,
            &LocalState::default(),
            |_| unreachable!(),
        )
        .unwrap_err();
        assert_eq!(e.status, 409);
    }
}
