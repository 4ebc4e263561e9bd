//! The root fields that tell callers and provider accounts apart: `caller_identity`,
//! `response_id_binding` and `account_headers`.

use super::fields::{ConfigError, Fields};
use super::identifiers::compile_identifier;
use super::settings::{AccountHeaders, CallerIdentity};

/// `caller_identity`: `{source: headers|metadata, key}` or `{source: jwt, claim,
/// payload_in_metadata}`; absent, the client's credential.
pub(super) fn compile_caller_identity(
    root: &mut Fields<'_>,
) -> Result<CallerIdentity, ConfigError> {
    Ok(match root.opt_object("caller_identity")? {
        Some(f) => CallerIdentity::Identifier(compile_identifier(f)?),
        None => CallerIdentity::Credential,
    })
}

/// `response_id_binding`: `"none"` (default) or `"caller"`.
pub(super) fn compile_id_binding(root: &mut Fields<'_>) -> Result<bool, ConfigError> {
    match root.opt_str("response_id_binding")? {
        None | Some("none") => Ok(false),
        Some("caller") => Ok(true),
        Some(other) => Err(root.error(
            "response_id_binding",
            format!("expected `none` or `caller`, got `{other}`"),
        )),
    }
}

/// `account_headers: {request: [...], response: [...]}`: each list replaces its default;
/// names are lower-cased.
pub(super) fn compile_account_headers(
    root: &mut Fields<'_>,
) -> Result<AccountHeaders, ConfigError> {
    let mut out = AccountHeaders::default();
    let Some(mut f) = root.opt_object("account_headers")? else {
        return Ok(out);
    };
    if let Some(items) = f.opt_array("request")? {
        out.request = header_names(items)?;
    }
    if let Some(items) = f.opt_array("response")? {
        out = out.with_response(header_names(items)?);
    }
    f.finish(&[])?;
    Ok(out)
}

fn header_names(items: Vec<(String, &serde_json::Value)>) -> Result<Vec<String>, ConfigError> {
    items
        .into_iter()
        .map(|(path, value)| match value.as_str() {
            Some(name) if is_header_name(name) => Ok(name.to_ascii_lowercase()),
            _ => Err(ConfigError::new(path, "expected a header name")),
        })
        .collect()
}

/// An HTTP field name (RFC 9110, section 5.1: a token), not a pseudo-header.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use crate::core::config::{CallerIdentity, Config, Provider, StickySource};

    fn parse(extra: &str) -> Result<Config, String> {
        let json =
            format!(r#"{{"models": [{{"name": "m", "cluster": "c", "model": "m"}}]{extra}}}"#);
        Config::parse(json.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn the_caller_is_the_credential_unless_configured() {
        let c = parse("").unwrap();
        assert_eq!(c.caller_identity, CallerIdentity::Credential);
        assert!(!c.bind_ids_to_caller);
        let c = parse(
            r#", "caller_identity": {"source": "headers", "key": "X-Tenant"},
                 "response_id_binding": "caller""#,
        )
        .unwrap();
        let CallerIdentity::Identifier(id) = &c.caller_identity else {
            panic!("{:?}", c.caller_identity)
        };
        assert_eq!(
            (id.source, id.key.as_str()),
            (StickySource::Headers, "x-tenant")
        );
        assert!(c.bind_ids_to_caller);
        assert!(parse(r#", "caller_identity": {"source": "jwt"}"#)
            .unwrap()
            .caller_identity
            .reads_jwt());
    }

    #[test]
    fn bad_caller_fields_name_their_path() {
        for (extra, path) in [
            (
                r#", "caller_identity": {"source": "cookie", "key": "a"}"#,
                "caller_identity.source",
            ),
            (
                r#", "caller_identity": {"source": "headers"}"#,
                "caller_identity.key",
            ),
            (
                r#", "response_id_binding": "tenant""#,
                "response_id_binding",
            ),
            (
                r#", "account_headers": {"request": ["ok", ""]}"#,
                "account_headers.request[1]",
            ),
            (
                r#", "account_headers": {"answer": []}"#,
                "account_headers.answer",
            ),
        ] {
            let e = parse(extra).unwrap_err();
            assert!(e.starts_with(path), "{extra}: {e}");
        }
    }

    #[test]
    fn account_header_lists_replace_their_defaults() {
        let c = parse("").unwrap();
        assert!(c
            .account_headers
            .request
            .contains(&"openai-project".to_string()));
        let response = |c: &Config, p| c.account_headers.response(p).to_vec();
        // By default, each provider's own.
        assert_eq!(
            response(&c, Provider::Anthropic),
            ["anthropic-organization-id"]
        );
        for p in [
            Provider::OpenAi,
            Provider::Azure,
            Provider::OpenAiCompatible,
        ] {
            assert_eq!(response(&c, p), ["openai-organization", "openai-project"]);
        }
        let c = parse(r#", "account_headers": {"request": ["X-Org"]}"#).unwrap();
        assert_eq!(c.account_headers.request, ["x-org"]);
        assert_eq!(
            response(&c, Provider::OpenAi).len(),
            2,
            "the other list keeps its default"
        );
        // A list given is every provider's.
        let c = parse(r#", "account_headers": {"response": ["X-Account"]}"#).unwrap();
        for (p, _) in Provider::ALL {
            assert_eq!(response(&c, p), ["x-account"]);
        }
    }
}
