//! Response ids Switchboard mints, and the mark on reasoning `encrypted_content`.
//!
//! TrueFoundry virtual models, "Responses API conversations": the gateway returns a response
//! id of its own that encodes which target served the turn alongside the provider's real id,
//! so a follow-up is pinned to that target with no shared cache; the id is opaque and the
//! provider's id is not exposed. Here: `resp_sb1-` + base64url(tag ‖ ciphertext), where the
//! plaintext names the virtual model, the catalog model and the provider's id; the tag is
//! HMAC-SHA256 of the plaintext (truncated to 16 bytes) and also the nonce of an HMAC-SHA256
//! keystream that hides it (a deterministic authenticated encryption in the SIV style; sealed and
//! opened by `core::seal`). Any changed character, a truncation or another key fails the tag
//! check.
//!
//! The first configured key signs; every key verifies, so keys can be rotated.
//!
//! Under `response_id_binding: "caller"` the plaintext also carries the caller's identity
//! digest ([`crate::core::caller`]), so the holder of an id cannot hand it to another caller;
//! the digest is sealed like the rest, so an id does not show who its caller is.

use crate::core::caller::Caller;
use crate::core::seal::Keys;

/// The prefix of every id Switchboard mints. Anything starting with it must decode.
pub const PREFIX: &str = "resp_sb1-";

/// The prefix of a marked `encrypted_content`: `sbrc1.` + token + `.` + the provider's value.
pub const MARK_PREFIX: &str = "sbrc1.";

/// Where a turn was served: what a minted id or a marked `encrypted_content` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The virtual model the client called.
    pub virtual_model: String,
    /// The catalog model that served the turn.
    pub model: String,
    /// The provider's own response id (empty in a mark).
    pub provider_id: String,
    /// The caller it was minted for, when ids are bound to callers.
    pub caller: Option<Caller>,
}

/// A turn that ids and marks are minted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn<'a> {
    /// The virtual model the client called.
    pub virtual_model: &'a str,
    /// The catalog model that served it.
    pub model: &'a str,
    /// The caller, when ids are bound to callers (`response_id_binding: "caller"`).
    pub caller: Option<Caller>,
}

impl<'a> Turn<'a> {
    /// A turn whose ids any caller may use.
    pub fn unbound(virtual_model: &'a str, model: &'a str) -> Turn<'a> {
        Turn {
            virtual_model,
            model,
            caller: None,
        }
    }
}

/// Why an id or mark was refused (TrueFoundry virtual models, "Responses API conversations",
/// answers each with 409).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotOurs;

/// Mints the id of `turn` answered as `provider_id`.
pub fn mint(keys: &Keys, turn: &Turn<'_>, provider_id: &str) -> String {
    let mut out = String::from(PREFIX);
    out.push_str(&keys.seal(&plaintext(turn, provider_id)));
    out
}

/// Decodes an id that starts with [`PREFIX`].
pub fn decode(keys: &Keys, id: &str) -> Result<Origin, NotOurs> {
    let sealed = id.strip_prefix(PREFIX).ok_or(NotOurs)?;
    let plain = keys.open(sealed).ok_or(NotOurs)?;
    parse_plaintext(&plain).ok_or(NotOurs)
}

/// Marks the provider's `encrypted_content` (raw JSON string content) as minted in `turn`.
pub fn mark(keys: &Keys, turn: &Turn<'_>, value: &str) -> String {
    format!("{MARK_PREFIX}{}.{value}", keys.seal(&plaintext(turn, "")))
}

/// Reads a marked `encrypted_content`: its origin and the provider's own value.
pub fn unmark<'v>(keys: &Keys, marked: &'v str) -> Result<(Origin, &'v str), NotOurs> {
    let rest = marked.strip_prefix(MARK_PREFIX).ok_or(NotOurs)?;
    let (token, value) = rest.split_once('.').ok_or(NotOurs)?;
    let plain = keys.open(token).ok_or(NotOurs)?;
    Ok((parse_plaintext(&plain).ok_or(NotOurs)?, value))
}

/// Set in the first length when a caller digest follows the model's name; names are far
/// shorter than 32 KiB, and ids minted before callers were bound decode as unbound.
const BOUND: u16 = 1 << 15;

/// `len(vm) ‖ vm ‖ len(model) ‖ model ‖ [caller] ‖ provider id`, lengths as little-endian u16
/// (the first with [`BOUND`] set when the 16-byte caller digest is there).
fn plaintext(turn: &Turn<'_>, provider_id: &str) -> Vec<u8> {
    let (vm, model) = (turn.virtual_model, turn.model);
    let mut p = Vec::with_capacity(20 + vm.len() + model.len() + provider_id.len());
    for (i, name) in [vm, model].into_iter().enumerate() {
        let len = u16::try_from(name.len()).unwrap_or(u16::MAX).min(BOUND - 1);
        let flag = if i == 0 && turn.caller.is_some() {
            BOUND
        } else {
            0
        };
        p.extend_from_slice(&(len | flag).to_le_bytes());
        p.extend_from_slice(name.as_bytes().get(..usize::from(len)).unwrap_or_default());
    }
    if let Some(caller) = turn.caller {
        p.extend_from_slice(&caller.0);
    }
    p.extend_from_slice(provider_id.as_bytes());
    p
}

fn parse_plaintext(p: &[u8]) -> Option<Origin> {
    let mut rest = p;
    let mut names = Vec::with_capacity(2);
    let mut bound = false;
    for i in 0..2 {
        let mut len = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?);
        if i == 0 {
            bound = len & BOUND != 0;
            len &= !BOUND;
        }
        let len = usize::from(len);
        names.push(std::str::from_utf8(rest.get(2..2 + len)?).ok()?.to_string());
        rest = rest.get(2 + len..)?;
    }
    let caller = match bound {
        true => {
            let digest = rest.get(..16)?.try_into().ok()?;
            rest = rest.get(16..)?;
            Some(Caller(digest))
        }
        false => None,
    };
    let provider_id = std::str::from_utf8(rest).ok()?.to_string();
    let model = names.pop()?;
    let virtual_model = names.pop()?;
    Some(Origin {
        virtual_model,
        model,
        provider_id,
        caller,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::seal::base64url_decode;

    fn keys() -> Keys {
        Keys::new(&["first-secret-of-thirty-two-bytes", "older-secret"])
    }

    #[test]
    fn an_id_round_trips_and_reveals_neither_name_nor_provider_id() {
        let id = mint(
            &keys(),
            &Turn::unbound("my-group/chat", "openai/gpt-4o"),
            "resp_abc123",
        );
        assert!(id.starts_with(PREFIX));
        for secret in ["my-group", "openai", "gpt-4o", "resp_abc123", "abc123"] {
            assert!(!id.contains(secret), "{id} shows {secret}");
        }
        let o = decode(&keys(), &id).unwrap();
        assert_eq!(
            (o.virtual_model.as_str(), o.model.as_str()),
            ("my-group/chat", "openai/gpt-4o")
        );
        assert_eq!(o.provider_id, "resp_abc123");
        // Deterministic: the same turn gets the same id on every Envoy.
        assert_eq!(
            id,
            mint(
                &keys(),
                &Turn::unbound("my-group/chat", "openai/gpt-4o"),
                "resp_abc123"
            )
        );
    }

    #[test]
    fn a_changed_character_a_truncation_or_another_key_is_refused() {
        let id = mint(&keys(), &Turn::unbound("vm", "m"), "resp_abc123");
        for at in PREFIX.len()..id.len() {
            let mut bytes = id.clone().into_bytes();
            bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).unwrap();
            assert_eq!(decode(&keys(), &changed), Err(NotOurs), "changed at {at}");
        }
        for len in 0..id.len() {
            assert!(decode(&keys(), &id[..len]).is_err(), "truncated to {len}");
        }
        let other = Keys::new(&["someone-else"]);
        assert_eq!(decode(&other, &id), Err(NotOurs));
        assert_eq!(decode(&Keys::default(), &id), Err(NotOurs));
        assert_eq!(decode(&keys(), "resp_sb1-"), Err(NotOurs));
        assert_eq!(decode(&keys(), "resp_sb1-!!"), Err(NotOurs));
    }

    #[test]
    fn every_configured_key_verifies_and_the_first_signs() {
        let old = Keys::new(&["older-secret"]);
        let id = mint(&old, &Turn::unbound("vm", "m"), "resp_1");
        assert_eq!(decode(&keys(), &id).unwrap().provider_id, "resp_1");
        let new = mint(&keys(), &Turn::unbound("vm", "m"), "resp_1");
        assert_eq!(decode(&old, &new), Err(NotOurs), "the first key signs");
    }

    #[test]
    fn the_built_in_key_is_used_without_configured_keys() {
        let k = Keys::new::<&str>(&[]);
        assert!(k.built_in);
        let id = mint(&k, &Turn::unbound("vm", "m"), "resp_1");
        assert_eq!(decode(&Keys::default(), &id).unwrap().model, "m");
    }

    #[test]
    fn a_mark_keeps_the_providers_value_and_names_its_origin() {
        let marked = mark(
            &keys(),
            &Turn::unbound("vm", "openai/gpt-4o"),
            "gAAAAB+x/y==",
        );
        assert!(marked.starts_with(MARK_PREFIX) && marked.ends_with(".gAAAAB+x/y=="));
        assert!(!marked.contains("openai"));
        let (origin, value) = unmark(&keys(), &marked).unwrap();
        assert_eq!(
            (origin.model.as_str(), value),
            ("openai/gpt-4o", "gAAAAB+x/y==")
        );
        let forged = marked.replacen("sbrc1.A", "sbrc1.B", 1);
        assert!(forged == marked || unmark(&keys(), &forged).is_err());
        assert!(unmark(&keys(), "gAAAAB").is_err());
    }

    #[test]
    fn a_bound_id_carries_its_caller_sealed_and_an_unbound_one_none() {
        let alice = Caller::of(b"Bearer sk-alice");
        let turn = Turn {
            caller: Some(alice),
            ..Turn::unbound("vm", "openai/gpt-4o")
        };
        let id = mint(&keys(), &turn, "resp_1");
        let origin = decode(&keys(), &id).unwrap();
        assert_eq!(origin.caller, Some(alice));
        assert_eq!(
            (origin.model.as_str(), origin.provider_id.as_str()),
            ("openai/gpt-4o", "resp_1")
        );
        let unbound = mint(&keys(), &Turn::unbound("vm", "openai/gpt-4o"), "resp_1");
        assert_eq!(decode(&keys(), &unbound).unwrap().caller, None);
        let marked = mark(&keys(), &turn, "gA==");
        let (origin, value) = unmark(&keys(), &marked).unwrap();
        assert_eq!((origin.caller, value), (Some(alice), "gA=="));
        // The digest is sealed: the id does not show it.
        let shown = base64url_decode(id.strip_prefix(PREFIX).unwrap()).unwrap();
        assert!(!shown.windows(16).any(|w| w == alice.0));
    }
}
