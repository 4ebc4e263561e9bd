//! Translation between OpenAI Chat Completions and Anthropic Messages, both ways, for a
//! virtual model whose target does not serve the client's API natively (`translate`). Each
//! attempt is translated for its own target by the outbound builder; the answer is translated
//! back as it streams. Pure functions over bytes: no host calls.

pub mod answer;
pub mod request;
pub mod stream;

/// A request field that cannot be carried to the target's API: a 400 in the client's shape,
/// naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untranslatable {
    /// The field's path in the client's body (`n`, `messages[2].content[0]`, `logprobs`).
    pub field: String,
    /// Why, for the error message.
    pub reason: String,
}

/// What the request translation needs to know about the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The provider's model id (the catalog model's `model`).
    pub model: &'a str,
    /// The catalog model's `max_output_tokens`: Anthropic requires `max_tokens`.
    pub max_output_tokens: Option<u32>,
    /// `anthropic_cache: "auto"` on the virtual model: add `cache_control` breakpoints.
    pub anthropic_cache: bool,
}

use crate::core::config::{Model, VirtualModel};
use crate::core::endpoint::{Api, Endpoint};

/// Which way an attempt's request is translated (and its answer back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A Chat Completions client, an Anthropic Messages target.
    ChatToMessages,
    /// A Messages client, a Chat Completions target.
    MessagesToChat,
}

impl Direction {
    /// The endpoint the target is called on.
    pub fn target_endpoint(self) -> Endpoint {
        match self {
            Direction::ChatToMessages => Endpoint::Messages,
            Direction::MessagesToChat => Endpoint::ChatCompletions,
        }
    }
}

/// How a request to `endpoint` is translated for `model`, a target of `vm`: `None` when the
/// model serves the endpoint natively, or the request may not be translated (a direct call to a
/// catalog model, an API not in the virtual model's `translate`, any endpoint but these two:
/// TrueFoundry virtual models, Responses "must be supported natively").
pub fn direction(
    vm: Option<&VirtualModel>,
    endpoint: Endpoint,
    model: &Model,
) -> Option<Direction> {
    if endpoint.served_by(model.apis) || !vm?.translation.apis.contains(endpoint.api()) {
        return None;
    }
    match endpoint {
        Endpoint::ChatCompletions if model.apis.contains(Api::Messages) => {
            Some(Direction::ChatToMessages)
        }
        Endpoint::Messages if model.apis.contains(Api::ChatCompletions) => {
            Some(Direction::MessagesToChat)
        }
        _ => None,
    }
}

/// Whether `model` can take a request to `endpoint` as a target of `vm`: natively, or translated.
pub fn serves(vm: Option<&VirtualModel>, endpoint: Endpoint, model: &Model) -> bool {
    endpoint.served_by(model.apis) || direction(vm, endpoint, model).is_some()
}
