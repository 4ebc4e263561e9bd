//! What a `/v1/responses` create carries that belongs to one provider account, and the plan
//! of a turn pinned to its origin.
//!
//! TrueFoundry virtual models, "Responses API conversations": a follow-up that names a
//! gateway-minted `previous_response_id`, or replays reasoning `encrypted_content` the gateway
//! marked, goes only to the target that served the turn — no load balancing, no sticky
//! routing, no fallback; retries at that target still apply. The provider's own values are
//! swapped back in before forwarding. Its error table: 409 when the id does not decode, 409
//! when the origin is no longer a target, 400 when the origin no longer serves the Responses
//! API natively.

use super::id::{self, Origin, MARK_PREFIX, PREFIX};
use crate::core::config::{Config, ModelId, Named, Routing, VirtualModel, Visibility};
use crate::core::endpoint::Endpoint;
use crate::core::errors::ErrorReply;
use crate::core::headers::Headers;
use crate::core::metadata::request_metadata;
use crate::core::request::{raw_field, Edit};
use crate::core::routing::RoutingState;
use crate::core::routing::{Plan, Request};
use crate::core::seal::Keys;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;

/// What a create continues.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// The turn's origin, from a minted `previous_response_id` or a marked reasoning item.
    pub origin: Option<Origin>,
    /// Edits that hand the provider its own values: the id swapped in, marks stripped.
    pub edits: Vec<Edit>,
    /// It names provider state by a raw id: a `previous_response_id` Switchboard did not mint,
    /// a `conversation`, or an `item_reference` input item (Zuplo, "Stored responses").
    pub raw_stored: bool,
}

/// One input item: only the fields read here, borrowed from the body.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    encrypted_content: Option<&'a RawValue>,
}

/// Where `part` (a slice of `body`) sits in it.
fn span_of(body: &[u8], part: &[u8]) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let range = start..start.checked_add(part.len())?;
    (range.end <= body.len()).then_some(range)
}

/// The raw content of a JSON string value (`"..."`), without its quotes, with its span.
fn string_content<'a>(body: &'a [u8], raw: &'a RawValue) -> Option<(&'a str, Range<usize>)> {
    let text = raw.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    let span = span_of(body, inner.as_bytes())?;
    Some((inner, span))
}

/// Reads the continuation of a create: `previous_response_id`, `conversation` and the
/// reasoning and `item_reference` items of `input`. An id or mark that looks like ours but
/// does not verify is a 409, before anything else about the request is looked at.
pub fn read(
    keys: &Keys,
    body: &[u8],
    fields: &[(Cow<'_, str>, Range<usize>)],
) -> Result<Continuation, ErrorReply> {
    let field = |name: &str| raw_field(body, fields, name);
    let mut out = Continuation::default();
    if let Some(raw) = field("previous_response_id") {
        if let Some((value, span)) = string_content(body, raw) {
            if value.starts_with(PREFIX) {
                let origin =
                    id::decode(keys, value).map_err(|_| ErrorReply::response_id_invalid())?;
                let provider = serde_json::to_string(&origin.provider_id).unwrap_or_default();
                out.edits.push(Edit {
                    span: (span.start - 1)..(span.end + 1),
                    with: provider.into_bytes(),
                });
                out.origin = Some(origin);
            } else {
                out.raw_stored = true;
            }
        }
    }
    if field("conversation").is_some_and(|c| c.get() != "null") {
        out.raw_stored = true;
    }
    if let Some(input) = field("input") {
        read_items(keys, body, input, &mut out)?;
    }
    Ok(out)
}

fn read_items(
    keys: &Keys,
    body: &[u8],
    input: &RawValue,
    out: &mut Continuation,
) -> Result<(), ErrorReply> {
    // `input` may be a plain string: nothing to read then. Told by its first byte, as serde's
    // error for it (built and formatted) cost about 25k instructions a request (callgrind, a
    // Responses request natively).
    if !input.get().trim_start().starts_with('[') {
        return Ok(());
    }
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(input.get()) else {
        return Ok(());
    };
    for item in items {
        let Ok(item) = serde_json::from_str::<Item<'_>>(item.get()) else {
            continue;
        };
        if item.kind.as_deref() == Some("item_reference") {
            out.raw_stored = true;
        }
        let Some((value, span)) = item.encrypted_content.and_then(|r| string_content(body, r))
        else {
            continue;
        };
        if !value.starts_with(MARK_PREFIX) {
            continue;
        }
        let (origin, provider_value) =
            id::unmark(keys, value).map_err(|_| ErrorReply::response_id_invalid())?;
        let start = span.end - provider_value.len();
        out.edits.push(Edit {
            span: span.start..start,
            with: Vec::new(),
        });
        match &out.origin {
            Some(o) if (&o.virtual_model, &o.model) != (&origin.virtual_model, &origin.model) => {
                return Err(ErrorReply::mixed_origins())
            }
            Some(_) => {}
            None => out.origin = Some(origin),
        }
    }
    Ok(())
}

/// The plan of a turn pinned to `origin`: that target only, no fallback. The request must call
/// the virtual model the id was minted for (an internal model is unknown to a client whatever
/// the body carries: 404; another name: 409), and goes through that virtual model's rules:
/// its `model_types`, the target's `metadata_match` and `when`, and (as every attempt of a
/// virtual model) the target's overrides.
pub fn pinned_plan(
    config: &Config,
    request: &Request<'_>,
    origin: &Origin,
) -> Result<Plan, ErrorReply> {
    check_caller(config, origin, request)?;
    let (index, vm) = match config.lookup(request.model) {
        None => return Err(ErrorReply::model_not_found(request.model)),
        Some(Named::Catalog(_, m)) if m.visibility == Visibility::Internal => {
            return Err(ErrorReply::model_not_found(request.model))
        }
        Some(Named::Virtual(index, vm)) if names_virtual(config, &origin.virtual_model, index) => {
            (index, vm)
        }
        Some(_) => return Err(ErrorReply::response_id_of_another_model(request.model)),
    };
    if !vm.model_types.contains(request.endpoint.model_type()) {
        return Err(ErrorReply::endpoint_not_served(
            request.model,
            request.endpoint.display_path(),
        ));
    }
    let target = match config.lookup(&origin.model) {
        Some(Named::Catalog(id, _)) if still_allowed(vm, id, request) => id,
        _ => return Err(ErrorReply::origin_removed(request.model)),
    };
    let serves = config
        .model(target)
        .is_some_and(|m| request.endpoint.served_by(m.apis));
    if !serves {
        return Err(ErrorReply::origin_not_native(
            &origin.model,
            request.endpoint.display_path(),
        ));
    }
    Ok(Plan {
        candidates: vec![target],
        virtual_model: Some(index),
        sticky: None,
        pinned: true,
    })
}

/// Whether `name` is virtual model `index`.
fn names_virtual(config: &Config, name: &str, index: usize) -> bool {
    matches!(config.lookup(name), Some(Named::Virtual(i, _)) if i == index)
}

/// Whether `target` is still a target of `vm` this request may reach: its `metadata_match`
/// holds and, under conditional routing, its `when` does.
fn still_allowed(vm: &VirtualModel, target: ModelId, request: &Request<'_>) -> bool {
    let matched = vm
        .target(target)
        .is_some_and(|t| request.metadata.matches(&t.metadata_match));
    let when = match &vm.routing {
        Routing::Conditional(targets) => targets
            .iter()
            .any(|t| t.model == target && t.when.eval(request)),
        _ => true,
    };
    matched && when
}

/// Under `response_id_binding: "caller"`, an id or mark serves only the caller it was minted
/// for: another caller's, or one minted before ids were bound, is a 409.
pub fn check_caller(
    config: &Config,
    origin: &Origin,
    request: &Request<'_>,
) -> Result<(), ErrorReply> {
    if !config.bind_ids_to_caller {
        return Ok(());
    }
    let caller = request.caller(&config.caller_identity);
    match origin.caller {
        Some(c) if c == caller => Ok(()),
        _ => Err(ErrorReply::foreign_response_id()),
    }
}

/// The origin of a stored-response path id (`GET`/`DELETE /v1/responses/{id}`, ...), checked
/// against the config: the virtual model and the target it names, still its target and its
/// `metadata_match` holding for this request, and the id this caller's when ids are bound.
pub fn stored_origin(
    config: &Config,
    response_id: &str,
    headers: &Headers,
    state: &dyn RoutingState,
) -> Result<(usize, ModelId, Origin), ErrorReply> {
    let keys = &config.response_keys;
    let origin = id::decode(keys, response_id).map_err(|_| ErrorReply::response_id_invalid())?;
    // The provider's id goes into the upstream path: only a plain token may (an id minted with
    // the built-in key could otherwise carry `/..` or `?`).
    if !is_plain_token(&origin.provider_id) {
        return Err(ErrorReply::response_id_invalid());
    }
    let metadata = request_metadata(config, headers)?;
    let request = Request {
        endpoint: Endpoint::Responses,
        model: &origin.virtual_model,
        metadata: &metadata,
        headers,
        state,
        body: &[],
        fields: &[],
        tier_hint: None,
    };
    check_caller(config, &origin, &request)?;
    let held = |vm: &VirtualModel, t: ModelId| {
        vm.target(t)
            .is_some_and(|tc| metadata.matches(&tc.metadata_match))
    };
    let found = match (
        config.lookup(&origin.virtual_model),
        config.lookup(&origin.model),
    ) {
        (Some(Named::Virtual(index, vm)), Some(Named::Catalog(t, _))) if held(vm, t) => {
            Some((index, t))
        }
        _ => None,
    };
    let (index, target) = found.ok_or_else(|| ErrorReply::origin_removed(&origin.virtual_model))?;
    Ok((index, target, origin))
}

/// Whether an id may go into a path as it is: letters, digits, `-` and `_`, not empty.
pub fn is_plain_token(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `/v1/responses/{id}`, `/v1/responses/{id}/input_items` and `/v1/responses/{id}/cancel`
/// (with or without `/v1`, query allowed): the id and the part after it.
pub fn stored_path(path: &str) -> Option<(&str, &'static str)> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    let rest = rest.strip_prefix("/responses/")?;
    let (id, suffix) = match rest.split_once('/') {
        Some((id, "input_items")) => (id, "/input_items"),
        Some((id, "cancel")) => (id, "/cancel"),
        Some(_) => return None,
        None => (rest, ""),
    };
    (!id.is_empty()).then_some((id, suffix))
}

#[cfg(test)]
mod tests;
