//! The per-request context: a small state machine over the request and response phases.
//!
//! Headers of an LLM request are paused until the body has arrived (Envoy must run with
//! `allow_on_headers_stop_iteration: true`); the core then decides the target and the adapter
//! writes the cluster header, the body and the target's headers before letting it go.

use super::host;
use crate::core::config::{Config, ModelId};
use crate::core::decision::{decide, Decision};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;

/// Where a request is in its life.
enum Phase {
    /// Not an LLM request: Switchboard leaves it alone.
    PassThrough,
    /// An LLM request whose body is being buffered.
    Inspecting(Endpoint),
    /// Sent to a target; its response gets the resolved-model header.
    Forwarded(ModelId),
    /// Switchboard answered it with a local reply.
    Replied,
}

/// One per HTTP stream.
pub struct Http {
    config: Option<Rc<Config>>,
    rng: fastrand::Rng,
    phase: Phase,
}

impl Http {
    /// A context for one request, sharing the root's compiled config.
    pub fn new(config: Option<Rc<Config>>, rng: fastrand::Rng) -> Self {
        Http {
            config,
            rng,
            phase: Phase::PassThrough,
        }
    }

    fn reply(&mut self, reply: &ErrorReply) -> Action {
        host::send_json_reply(reply.status, &reply.body);
        self.phase = Phase::Replied;
        Action::Pause
    }

    /// Routes the fully buffered request, or answers it with an error.
    fn route(&mut self, endpoint: Endpoint, body_size: usize) -> Action {
        let Some(config) = self.config.clone() else {
            return self.reply(&ErrorReply::no_target_available("any model"));
        };
        let body = host::request_body(body_size);
        match decide(
            &config,
            endpoint,
            &body,
            &crate::core::routing::HealthInput::NONE,
            &mut self.rng,
        ) {
            Ok(decision) => self.forward(&config, &decision, body.len()),
            Err(reply) => self.reply(&reply),
        }
    }

    fn forward(&mut self, config: &Config, decision: &Decision, old_len: usize) -> Action {
        let Some(model) = decision.model(config) else {
            return self.reply(&ErrorReply::no_target_available("the requested model"));
        };
        if let Some(body) = &decision.new_body {
            if !host::replace_request_body(old_len, body) {
                return self.reply(&ErrorReply::invalid_json("the body could not be rewritten"));
            }
            host::set_request_header("content-length", &body.len().to_string());
        }
        for (name, value) in &model.headers {
            host::set_request_header(name, value);
        }
        // Last, so the route is re-selected with the final headers.
        host::set_request_header(&config.header_names.cluster, &model.cluster);
        self.phase = Phase::Forwarded(decision.target);
        Action::Continue
    }
}

impl Context for Http {}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(config) = self.config.clone() else {
            return Action::Continue;
        };
        let endpoint = host::request_header(":path")
            .and_then(|p| std::str::from_utf8(&p).ok().and_then(Endpoint::from_path))
            .filter(|_| host::request_header(":method").as_deref() == Some(b"POST"));
        let Some(endpoint) = endpoint else {
            // Never let a client pick the cluster through the route's cluster_header.
            host::remove_request_header(&config.header_names.cluster);
            return Action::Continue;
        };
        if end_of_stream {
            return self.reply(&ErrorReply::body_required());
        }
        let declared = host::request_header("content-length")
            .and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse::<usize>().ok());
        if declared.is_some_and(|n| n > config.max_request_body_bytes) {
            return self.reply(&ErrorReply::body_too_large(config.max_request_body_bytes));
        }
        self.phase = Phase::Inspecting(endpoint);
        Action::Pause
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Phase::Inspecting(endpoint) = self.phase else {
            return Action::Continue;
        };
        let limit = self
            .config
            .as_ref()
            .map_or(usize::MAX, |c| c.max_request_body_bytes);
        if body_size > limit {
            return self.reply(&ErrorReply::body_too_large(limit));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.route(endpoint, body_size)
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        // A body that ends with trailers never sees end_of_stream in the body callback.
        match self.phase {
            Phase::Inspecting(endpoint) => self.route(endpoint, usize::MAX),
            _ => Action::Continue,
        }
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if let (Phase::Forwarded(target), Some(config)) = (&self.phase, &self.config) {
            if let Some(model) = config.model(*target) {
                host::set_response_header(&config.header_names.resolved_model, &model.name);
            }
        }
        Action::Continue
    }
}
