//! The request one attempt sends to one target: cluster, `:authority`, `:path`, headers and
//! body edits. [`outbound`] builds it for every attempt — the router's, each retry and
//! fallback made with a call-out, and the classifier call — so they can never drift apart.
//!
//! Precedence of headers: the client's, then the catalog model's `headers`, then the target's
//! `headers_override` (TrueFoundry virtual models, "Header overrides": applied last). A
//! call-out does not pass through Envoy's route table, so no route rewrite can fix it later:
//! what is built here is what the provider sees.
//!
//! A translated attempt (a virtual model's `translate`, [`translate::direction`])
//! is built here too, so the router's attempt, retries and fallbacks all get it: its body is
//! the client's translated whole to the target's API, its path that API's, and the client's
//! headers of the other API are not sent.

use crate::core::config::VirtualModel;
use crate::core::config::{
    is_credential, Config, HeaderNames, HeadersOverride, Model, ModelId, Provider,
    CREDENTIAL_HEADERS,
};
use crate::core::endpoint::Endpoint;
use crate::core::headers::Headers;
use crate::core::request::{rewrite, Edit, Edits, Layout};
use crate::core::translate::{self, Direction, Target, Untranslatable};
use std::borrow::Cow;

/// Anthropic refuses a request without `anthropic-version`; this is the version of the
/// Messages API as Anthropic documents it. A client's own value is kept: Anthropic SDKs send
/// the version they speak.
const ANTHROPIC_VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

/// Request headers never copied onto a call-out: hop-by-hop, or recomputed for its body.
const NOT_FORWARDED: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// The client's Anthropic headers, which an OpenAI-compatible target of a translated Messages
/// request does not know (Anthropic API reference, "Versions" and "Beta headers"; the SDKs send
/// the last from a browser).
const ANTHROPIC_CLIENT_HEADERS: &[&str] = &[
    "anthropic-version",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
];

/// The client's request, as the filter received it.
#[derive(Debug, Clone, Copy)]
pub struct ClientRequest<'r> {
    /// The endpoint called.
    pub endpoint: Endpoint,
    /// Its headers, pseudo-headers (`:path`, `:authority`) included.
    pub headers: &'r Headers,
    /// Its body and where its parts sit, when the target's body may differ from it.
    pub body: Option<(&'r [u8], &'r Layout)>,
    /// The path after the version prefix when it is not the endpoint's own: a stored
    /// response's `/responses/{provider id}/input_items`, say.
    pub stored_path: Option<&'r str>,
}

/// What one attempt sends, as changes to the client's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound<'c> {
    /// The Envoy cluster.
    pub cluster: &'c str,
    /// The `:authority` to set; `None` when the client's is already right.
    pub authority: Option<&'c str>,
    /// The `:path` to set; `None` when the client's is already right.
    pub path: Option<String>,
    /// Client headers to remove (only names the client sent and nothing sets again).
    pub remove: Vec<&'c str>,
    /// Headers to set, overwriting the client's, in order.
    pub set: Vec<(&'c str, &'c str)>,
    /// How the body changes, or `None` when it does not.
    pub edits: Option<Edits>,
}

/// The outbound request of an attempt at `target`, a catalog model called directly or a
/// target of `vm`. `None` if the target is unknown or the body cannot be rewritten or
/// translated for it ([`try_outbound`] says which).
pub fn outbound<'c>(
    config: &'c Config,
    vm: Option<&'c VirtualModel>,
    target: ModelId,
    client: &ClientRequest<'_>,
) -> Option<Outbound<'c>> {
    try_outbound(config, vm, target, client).ok()
}

/// Why an attempt's request could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unbuildable {
    /// The target is not in the catalog, or the body could not be rewritten for it.
    Rewrite,
    /// The request needs translating for the target and has a field its API cannot carry.
    Untranslatable(Untranslatable),
}

/// [`outbound`], saying why it could not be built: the decision answers an untranslatable
/// first attempt with a 400 naming the field.
pub fn try_outbound<'c>(
    config: &'c Config,
    vm: Option<&'c VirtualModel>,
    target: ModelId,
    client: &ClientRequest<'_>,
) -> Result<Outbound<'c>, Unbuildable> {
    let model = config.model(target).ok_or(Unbuildable::Rewrite)?;
    let o = vm
        .and_then(|vm| vm.target(target))
        .map(|t| &t.headers_override);
    let direction = translate::direction(vm, client.endpoint, model);
    let edits = match (direction, client.body) {
        (Some(d), Some((body, _))) => Some(translated(config, vm, target, d, body)?),
        // Only chat and Messages requests are translated, and they always carry a body.
        (Some(_), None) => return Err(Unbuildable::Rewrite),
        (None, Some((body, layout))) => {
            body_for(config, vm, body, layout, target).ok_or(Unbuildable::Rewrite)?
        }
        (None, None) => None,
    };
    // Anthropic refuses a Messages request without a version: a request translated to
    // Messages gets it whatever the provider, one translated to Chat Completions never does.
    let messages_api = match direction {
        Some(d) => d == Direction::ChatToMessages,
        None => model.provider == Provider::Anthropic,
    };
    let set = headers_to_set(model, o, client.headers, messages_api);
    let mut remove = headers_to_remove(config, model, o, client.headers, &set);
    let mut drop = |name: &'static str| {
        let sent = client.headers.get(name).is_some();
        if sent && !set.iter().any(|(n, _)| *n == name) && !remove.contains(&name) {
            remove.push(name);
        }
    };
    // The answer is read to be changed as it streams: a virtual model's Responses answers get
    // Switchboard's ids, a translated answer is rewritten into the client's API. The provider
    // must answer uncompressed, or it could not be read.
    let minted = client.endpoint == Endpoint::Responses && vm.is_some();
    if minted || direction.is_some() {
        drop("accept-encoding");
    }
    if direction == Some(Direction::MessagesToChat) {
        ANTHROPIC_CLIENT_HEADERS.iter().for_each(|n| drop(n));
    }
    let authority = model
        .upstream
        .authority
        .as_deref()
        .filter(|a| client.headers.get(":authority") != Some(a.as_bytes()));
    let path = match direction {
        // The target API's own path. The client's query parameters belong to the client's API
        // (the Anthropic SDK's `?beta=true`) and are not sent; the model's `query` is.
        Some(d) => {
            let endpoint = d.target_endpoint();
            upstream_path(model, endpoint, endpoint.unversioned_path(), "")
        }
        None => {
            let client_path = client.headers.get_str(":path").unwrap_or_default();
            let unversioned = client
                .stored_path
                .unwrap_or_else(|| client.endpoint.unversioned_path());
            upstream_path(model, client.endpoint, unversioned, client_path)
        }
    };
    Ok(Outbound {
        cluster: &model.cluster,
        authority,
        path,
        remove,
        set,
        edits,
    })
}

/// The client's body translated for `target` (`direction`), as one edit replacing it whole,
/// with the target's `override_params` set on the translated body: they are the target API's
/// fields. Built whole, never edited in place: both APIs reject fields they do not know.
fn translated(
    config: &Config,
    vm: Option<&VirtualModel>,
    target: ModelId,
    direction: Direction,
    body: &[u8],
) -> Result<Edits, Unbuildable> {
    let model = config.model(target).ok_or(Unbuildable::Rewrite)?;
    let to = Target {
        model: &model.upstream_model,
        max_output_tokens: model.max_output_tokens,
        anthropic_cache: vm.is_some_and(|vm| vm.translation.anthropic_cache),
    };
    let with = match direction {
        Direction::ChatToMessages => translate::request::chat_to_messages(body, &to),
        Direction::MessagesToChat => translate::request::messages_to_chat(body, &to),
    }
    .map_err(Unbuildable::Untranslatable)?;
    let overrides = vm
        .and_then(|vm| vm.target(target))
        .map_or(&[][..], |t| t.override_params.as_slice());
    let with = with_overrides(with, overrides).ok_or(Unbuildable::Rewrite)?;
    let whole = Edit {
        span: 0..body.len(),
        with,
    };
    Edits::new(vec![whole], body.len()).ok_or(Unbuildable::Rewrite)
}

/// A translated JSON body with each `(key, raw JSON)` of `overrides` set as a top-level field.
fn with_overrides(body: Vec<u8>, overrides: &[(String, String)]) -> Option<Vec<u8>> {
    if overrides.is_empty() {
        return Some(body);
    }
    let mut map: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&body).ok()?;
    for (key, raw) in overrides {
        map.insert(key.clone(), serde_json::from_str(raw).ok()?);
    }
    serde_json::to_vec(&map).ok()
}

/// How the client's body changes for `target` (its upstream model id and, for a virtual
/// model's target, its `override_params`): `Some(None)` when it does not, `None` if it cannot.
pub fn body_for(
    config: &Config,
    vm: Option<&VirtualModel>,
    body: &[u8],
    layout: &Layout,
    target: ModelId,
) -> Option<Option<Edits>> {
    let model = config.model(target)?;
    if layout.multipart {
        // A form field holds the bare name; override_params are JSON fields and do not apply.
        return rewrite(body, layout, model.upstream_model.as_bytes(), &[]);
    }
    let overrides = vm
        .and_then(|vm| vm.target(target))
        .map_or(&[][..], |t| t.override_params.as_slice());
    rewrite(
        body,
        layout,
        model.upstream_model_json.as_bytes(),
        overrides,
    )
}

/// Catalog headers not overridden, then the override's, then Anthropic's version if no one
/// gives it and the attempt speaks Messages to `messages_api`.
fn headers_to_set<'c>(
    model: &'c Model,
    o: Option<&'c HeadersOverride>,
    client: &Headers,
    messages_api: bool,
) -> Vec<(&'c str, &'c str)> {
    let overridden = |n: &str| {
        o.is_some_and(|o| o.remove.iter().any(|r| r == n) || o.set.iter().any(|(s, _)| s == n))
    };
    let mut set: Vec<(&str, &str)> = model
        .headers
        .iter()
        .filter(|(n, _)| !overridden(n))
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    if let Some(o) = o {
        set.extend(o.set.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    }
    let (version, _) = ANTHROPIC_VERSION;
    if messages_api
        && client.get(version).is_none()
        && !overridden(version)
        && !set.iter().any(|(n, _)| *n == version)
    {
        set.push(ANTHROPIC_VERSION);
    }
    set
}

/// Whether an attempt at `model` carries the gateway's own credential: its catalog entry or the
/// target's `headers_override` sets one.
fn brings_credential(model: &Model, o: Option<&HeadersOverride>) -> bool {
    model.sets_credential || o.is_some_and(|o| o.set.iter().any(|(n, _)| is_credential(n)))
}

/// Whether an attempt at `target` (a catalog model, or a target of `vm`) carries the gateway's
/// own credential rather than the client's.
pub fn carries_gateway_credential(
    config: &Config,
    vm: Option<&VirtualModel>,
    target: ModelId,
) -> bool {
    let Some(model) = config.model(target) else {
        return false;
    };
    let o = vm
        .and_then(|vm| vm.target(target))
        .map(|t| &t.headers_override);
    brings_credential(model, o)
}

/// The provider's answer headers the client must not see from an answer by `target`: its
/// `account_headers.response` for its provider when the attempt carried the gateway's
/// credential (they name the gateway's organisation or project), else none.
pub fn hidden_answer_headers<'c>(
    config: &'c Config,
    vm: Option<&VirtualModel>,
    target: ModelId,
) -> &'c [String] {
    let o = vm
        .and_then(|vm| vm.target(target))
        .map(|t| &t.headers_override);
    match config.model(target) {
        Some(model) if brings_credential(model, o) => {
            config.account_headers.response(model.provider)
        }
        _ => &[],
    }
}

/// Client headers that must not reach the target: its credentials and account headers when
/// the target brings its own credential, Switchboard's metadata and trace-token headers, and
/// the override's `remove`.
fn headers_to_remove<'c>(
    config: &'c Config,
    model: &Model,
    o: Option<&'c HeadersOverride>,
    client: &Headers,
    set: &[(&str, &str)],
) -> Vec<&'c str> {
    // With the gateway's credential go neither the client's credentials nor the client's
    // account-selecting headers (`account_headers.request`): on the gateway's key they would
    // pick an organisation or project of the gateway's account.
    let gateway_key = brings_credential(model, o);
    let credentials = CREDENTIAL_HEADERS
        .iter()
        .copied()
        .chain(config.account_headers.request.iter().map(String::as_str))
        .filter(|_| gateway_key);
    // Switchboard's own request headers: routing metadata, and the trace token (a secret).
    let own = [
        config.header_names.metadata.as_str(),
        config.header_names.trace_token.as_str(),
    ];
    let removed = o
        .into_iter()
        .flat_map(|o| o.remove.iter().map(String::as_str));
    let mut out: Vec<&str> = Vec::new();
    for name in credentials.chain(own).chain(removed) {
        let sent = client.get(name).is_some();
        if sent && !set.iter().any(|(n, _)| *n == name) && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The upstream path: `base_path` + the path without its version prefix (`unversioned`),
/// else the endpoint's version prefix + `unversioned`; then the client's query parameters not
/// named in the model's `query`, then those. `None` when that is the client's path as sent.
fn upstream_path(
    model: &Model,
    endpoint: Endpoint,
    unversioned: &str,
    client_path: &str,
) -> Option<String> {
    let (client_base, client_query) = match client_path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (client_path, None),
    };
    let up = &model.upstream;
    let version = endpoint.version_prefix();
    let canonical = client_base
        .strip_prefix(version)
        .is_some_and(|rest| rest == unversioned);
    if up.base_path.is_none() && up.query.is_empty() && canonical {
        return None;
    }
    let prefix = up.base_path.as_deref().unwrap_or(version);
    let mut path = format!("{prefix}{unversioned}");
    let kept = client_query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
        .filter(|p| {
            let name = p.split_once('=').map_or(*p, |(n, _)| n);
            !up.query.iter().any(|(n, _)| n == name)
        });
    let added = up.query.iter().map(|(_, pair)| pair.as_str());
    for (i, param) in kept.chain(added).enumerate() {
        path.push(if i == 0 { '?' } else { '&' });
        path.push_str(param);
    }
    (path != client_path).then_some(path)
}

impl Outbound<'_> {
    /// The body this attempt sends: the client's, edited for the target if needed.
    pub fn body<'b>(&self, client_body: &'b [u8]) -> Option<Cow<'b, [u8]>> {
        match &self.edits {
            Some(edits) => edits.apply(client_body).map(Cow::Owned),
            None => Some(Cow::Borrowed(client_body)),
        }
    }

    /// Every header of this attempt made as a call-out: the client's with the changes applied,
    /// its `:authority` and `:path` replaced, and `content-length` for `body_len`.
    pub fn call_headers<'a>(
        &'a self,
        client: &'a Headers,
        names: &HeaderNames,
        content_length: &'a str,
    ) -> Vec<(&'a str, &'a str)> {
        let dropped = |k: &str| {
            NOT_FORWARDED.contains(&k)
                || k == names.cluster
                || self.remove.contains(&k)
                || self.set.iter().any(|(n, _)| *n == k)
        };
        let mut out: Vec<(&str, &str)> = Vec::with_capacity(client.len() + self.set.len() + 3);
        for (k, v) in client.text_pairs().filter(|(k, _)| !dropped(k)) {
            let v = match k {
                ":authority" => self.authority.unwrap_or(v),
                ":path" => self.path.as_deref().unwrap_or(v),
                _ => v,
            };
            out.push((k, v));
        }
        if let Some(a) = self
            .authority
            .filter(|_| client.get(":authority").is_none())
        {
            out.push((":authority", a));
        }
        if let Some(p) = self
            .path
            .as_deref()
            .filter(|_| client.get(":path").is_none())
        {
            out.push((":path", p));
        }
        out.extend(self.set.iter().copied());
        out.push(("content-length", content_length));
        out
    }
}

#[cfg(test)]
mod tests;
