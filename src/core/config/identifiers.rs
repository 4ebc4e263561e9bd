//! Where a session or caller identity is read (`session_identifiers`, `caller_identifier`,
//! `caller_identity`, a `jwt`, `body` or `agent_session` hash key): a header, a metadata
//! value, a claim of the verified JWT, a string member of the JSON body, or the session a
//! coding agent sends.

use super::fields::{ConfigError, Fields};
use super::strategy::{SessionIdentifier, StickySource, DEFAULT_JWT_PAYLOAD};

/// `{key, source: headers|metadata|body}`, `{source: jwt, claim, payload_in_metadata}` or
/// `{source: agent_session}`: where a session or caller identity is read.
pub(super) fn compile_identifier(mut id: Fields<'_>) -> Result<SessionIdentifier, ConfigError> {
    let source = match id.str("source")? {
        "headers" => StickySource::Headers,
        "metadata" => StickySource::Metadata,
        "jwt" => StickySource::Jwt,
        "body" => StickySource::Body,
        "agent_session" => StickySource::AgentSession,
        other => {
            return Err(id.error(
                "source",
                format!(
                "expected `headers`, `metadata`, `jwt`, `body` or `agent_session`, got `{other}`"
            ),
            ))
        }
    };
    let (key, payload) = match source {
        StickySource::Headers => (id.str("key")?.to_ascii_lowercase(), String::new()),
        StickySource::Metadata => (id.str("key")?.to_string(), String::new()),
        StickySource::Body => (body_path(&mut id)?, String::new()),
        StickySource::AgentSession => (String::new(), String::new()),
        StickySource::Jwt => {
            let (payload, claim) = jwt_claim(&mut id)?;
            (claim, payload)
        }
    };
    id.finish(&[])?;
    Ok(SessionIdentifier {
        key,
        source,
        payload,
    })
}

/// `{claim, payload_in_metadata}` of a `jwt` source, with their defaults.
pub(super) fn jwt_claim(f: &mut Fields<'_>) -> Result<(String, String), ConfigError> {
    let claim = f.opt_str("claim")?.unwrap_or("sub").to_string();
    let payload = f
        .opt_str("payload_in_metadata")?
        .unwrap_or(DEFAULT_JWT_PAYLOAD)
        .to_string();
    if claim.is_empty() || payload.is_empty() {
        return Err(f.error(
            "claim",
            "the claim and payload_in_metadata must not be empty",
        ));
    }
    Ok((payload, claim))
}

/// The `key` of a `body` source: a top-level member or `parent.child`, each part non-empty.
/// Two levels reach `metadata.user_id` (Anthropic Messages) and stay one bounded look into
/// one member; deeper paths are refused rather than walked.
pub(super) fn body_path(f: &mut Fields<'_>) -> Result<String, ConfigError> {
    let key = f.str("key")?;
    let parts = key.split('.').collect::<Vec<_>>();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(f.error(
            "key",
            format!("`{key}` must name a body member: `field` or `parent.child`, no empty part"),
        ));
    }
    if parts.len() > 2 {
        return Err(f.error(
            "key",
            format!(
                "`{key}` is {} levels deep; at most two (`parent.child`)",
                parts.len()
            ),
        ));
    }
    Ok(key.to_string())
}
