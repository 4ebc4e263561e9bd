//! Where a session or caller identity is read (`session_identifiers`, `caller_identifier`,
//! `caller_identity`, a `jwt` hash key): a header, a metadata value or a claim of the
//! verified JWT.

use super::fields::{ConfigError, Fields};
use super::strategy::{SessionIdentifier, StickySource, DEFAULT_JWT_PAYLOAD};

/// `{key, source: headers|metadata}`, or `{source: jwt, claim, payload_in_metadata}`: where a
/// session or caller identity is read.
pub(super) fn compile_identifier(mut id: Fields<'_>) -> Result<SessionIdentifier, ConfigError> {
    let source = match id.str("source")? {
        "headers" => StickySource::Headers,
        "metadata" => StickySource::Metadata,
        "jwt" => StickySource::Jwt,
        other => {
            return Err(id.error(
                "source",
                format!("expected `headers`, `metadata` or `jwt`, got `{other}`"),
            ))
        }
    };
    let (key, payload) = match source {
        StickySource::Headers => (id.str("key")?.to_ascii_lowercase(), String::new()),
        StickySource::Metadata => (id.str("key")?.to_string(), String::new()),
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
