//! Header names and values a config sets (`header_names`, a model's `headers`, a target's
//! `headers_override`, the trace token): valid HTTP, free of control characters, and never a
//! header Envoy or Switchboard manages.

use super::fields::{ConfigError, Fields};
use super::settings::HeaderNames;
use super::upstream::{expand_env, Env};

/// `header_names`: the names of the headers the filter reads and writes, each `x-`
/// prefixed and all different.
pub(super) fn compile_header_names(mut f: Fields<'_>) -> Result<HeaderNames, ConfigError> {
    let mut names = HeaderNames::default();
    for (key, slot) in [
        ("cluster", &mut names.cluster),
        ("resolved_model", &mut names.resolved_model),
        ("attempts", &mut names.attempts),
        ("metadata", &mut names.metadata),
        ("trace", &mut names.trace),
        ("trace_token", &mut names.trace_token),
    ] {
        if let Some(value) = f.opt_str(key)? {
            let lower = value.to_ascii_lowercase();
            if !is_token(value) || !lower.starts_with("x-") {
                return Err(f.error(key, "must be a valid HTTP header name starting with `x-`"));
            }
            *slot = lower;
        }
    }
    let all = [
        ("cluster", &names.cluster),
        ("resolved_model", &names.resolved_model),
        ("attempts", &names.attempts),
        ("metadata", &names.metadata),
        ("trace", &names.trace),
        ("trace_token", &names.trace_token),
    ];
    for (i, (key, name)) in all.iter().enumerate() {
        if let Some((other, _)) = all.iter().take(i).find(|(_, n)| n == name) {
            return Err(f.error(key, format!("must differ from `{other}`")));
        }
    }
    f.finish(&["metadata"])?;
    Ok(names)
}

/// Lower-cases a configured header name and refuses names the filter must own.
pub(super) fn checked_header_name(
    name: &str,
    header_names: &HeaderNames,
) -> Result<String, String> {
    if !is_token(name) {
        return Err(format!("`{name}` is not a valid HTTP header name"));
    }
    let lower = name.to_ascii_lowercase();
    if lower == header_names.cluster
        || matches!(
            lower.as_str(),
            "content-length" | "transfer-encoding" | "host" | "connection"
        )
    {
        return Err(format!(
            "`{lower}` is managed by Envoy or Switchboard and cannot be set here"
        ));
    }
    Ok(lower)
}

/// RFC 9110 token characters: what a header name may hold.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A configured header value with its `${env:NAME}` references resolved. Neither error shows
/// the value: it may be a key.
pub(super) fn header_value(value: &str, path: &str, env: &Env<'_>) -> Result<String, ConfigError> {
    let value = expand_env(value, path, env)?;
    if !is_header_value(&value) {
        return Err(ConfigError::new(
            path,
            "value must not contain control characters",
        ));
    }
    Ok(value)
}

/// A header value must not smuggle a line break or other control character.
pub(super) fn is_header_value(s: &str) -> bool {
    s.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}
