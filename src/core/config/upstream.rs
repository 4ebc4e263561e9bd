//! How a catalog model is reached: `authority`, `base_path`, `query`, and header values that
//! name an environment variable (`${env:NAME}`).
//!
//! Hosted providers refuse a request with another service's host name, path or credential:
//! OpenAI wants `api.openai.com` and `/v1/...`, Azure OpenAI its resource host and
//! `/openai/deployments/{deployment}/...?api-version=...`, Anthropic `x-api-key` and
//! `anthropic-version`. These fields let every attempt carry its target's own shape.

use super::fields::{ConfigError, Fields};

/// Where and how attempts to one catalog model go, beyond its cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstream {
    /// `authority`: the `:authority` (Host) of every attempt; `None` keeps the client's.
    pub authority: Option<String>,
    /// `base_path`: replaces the endpoint's version prefix (`/v1`) in the upstream path.
    pub base_path: Option<String>,
    /// `query`: parameters added to the upstream path, each as `name` and `name=value`,
    /// percent-encoded once here.
    pub query: Vec<(String, String)>,
}

/// Reads `authority`, `base_path` and `query` of a catalog model.
pub(super) fn compile_upstream(f: &mut Fields<'_>) -> Result<Upstream, ConfigError> {
    let authority = match f.opt_str("authority")? {
        Some(a) if is_authority(a) => Some(a.to_ascii_lowercase()),
        Some(_) => {
            return Err(f.error(
                "authority",
                "expected a host name or address with an optional port, such as \
                 `api.openai.com` or `vllm.internal:8000`",
            ))
        }
        None => None,
    };
    let base_path = match f.opt_str("base_path")? {
        Some(p) if !p.starts_with('/') => {
            return Err(f.error("base_path", "must start with `/`"));
        }
        Some(p) if p.contains('?') || p.contains('#') => {
            return Err(f.error(
                "base_path",
                "must not contain `?` or `#`; put query parameters in `query`",
            ));
        }
        Some(p) if !p.bytes().all(is_path_byte) => {
            return Err(f.error(
                "base_path",
                "may hold only URL path characters (percent-encode the others)",
            ));
        }
        // A trailing `/` would double the endpoint path's leading one.
        Some(p) => Some(p.trim_end_matches('/').to_string()),
        None => None,
    };
    let mut query = Vec::new();
    for entry in f.opt_string_map("query")? {
        if entry.key.is_empty() {
            return Err(ConfigError::new(entry.path, "a parameter name is empty"));
        }
        if (entry.key.bytes().chain(entry.value.bytes())).any(|b| b.is_ascii_control()) {
            return Err(ConfigError::new(
                entry.path,
                "must not contain control characters",
            ));
        }
        let name = percent_encode(entry.key);
        let pair = format!("{name}={}", percent_encode(entry.value));
        query.push((name, pair));
    }
    Ok(Upstream {
        authority,
        base_path,
        query,
    })
}

/// `host[:port]`: a DNS name, an IPv4 address or a bracketed IPv6 address, and a port 1–65535.
fn is_authority(s: &str) -> bool {
    let (host_ok, port) = match s.strip_prefix('[') {
        Some(rest) => {
            let Some((v6, after)) = rest.split_once(']') else {
                return false;
            };
            let ok = !v6.is_empty() && v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
            match after {
                "" => (ok, None),
                a => match a.strip_prefix(':') {
                    Some(p) => (ok, Some(p)),
                    None => return false,
                },
            }
        }
        None => match s.split_once(':') {
            Some((h, p)) => (is_dns_name(h), Some(p)),
            None => (is_dns_name(s), None),
        },
    };
    let port_ok = port.is_none_or(|p| {
        p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u16>().is_ok_and(|n| n > 0)
    });
    host_ok && port_ok
}

/// Dot-separated labels of letters, digits and inner hyphens (an IPv4 address is one too).
fn is_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// RFC 3986 path characters (`pchar` and `/`), `%` included for escapes written by hand.
fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b)
}

/// Percent-encodes every byte but RFC 3986's unreserved ones.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Where `${env:NAME}` references are read: the adapter's environment (the Wasm VM's, which
/// Envoy fills from `host_env_keys`; Envoy's own for the native module), limited to the root
/// `env_keys` list when the config has one.
pub(super) struct Env<'a> {
    read: &'a dyn Fn(&str) -> Option<String>,
    /// `env_keys`: the only names a reference may use; `None`: any.
    keys: Option<Vec<String>>,
    /// The names read while no `env_keys` limits them.
    unlisted: std::cell::RefCell<Vec<String>>,
}

impl<'a> Env<'a> {
    /// Reads with `read`, limited to `keys` when given.
    pub(super) fn new(read: &'a dyn Fn(&str) -> Option<String>, keys: Option<Vec<String>>) -> Self {
        Env {
            read,
            keys,
            unlisted: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// The value of variable `name`, referenced at `path`.
    fn get(&self, name: &str, path: &str) -> Result<String, ConfigError> {
        match &self.keys {
            Some(keys) if !keys.iter().any(|k| k == name) => {
                return Err(ConfigError::new(
                    path,
                    format!("environment variable `{name}` is not listed in `env_keys`"),
                ));
            }
            Some(_) => {}
            None => self.unlisted.borrow_mut().push(name.to_string()),
        }
        (self.read)(name).ok_or_else(|| {
            ConfigError::new(
                path,
                format!(
                    "environment variable `{name}` is not set; hand it to the Wasm VM with \
                     vm_config.environment_variables.host_env_keys"
                ),
            )
        })
    }

    /// The variables read with no `env_keys` to limit them, sorted, once each.
    pub(super) fn unlisted(&self) -> Vec<String> {
        let mut names = self.unlisted.borrow().clone();
        names.sort();
        names.dedup();
        names
    }
}

/// `env_keys`: the environment variables `${env:NAME}` may read, each a variable name.
/// Absent: any (the native module then warns, since there that is any of Envoy's).
pub(super) fn compile_env_keys(root: &mut Fields<'_>) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(items) = root.opt_array("env_keys")? else {
        return Ok(None);
    };
    let mut keys = Vec::with_capacity(items.len());
    for (path, value) in items {
        match value.as_str() {
            Some(name) if is_env_name(name) => keys.push(name.to_string()),
            _ => {
                return Err(ConfigError::new(
                    path,
                    "expected an environment variable name (letters, digits, `_`)",
                ))
            }
        }
    }
    Ok(Some(keys))
}

/// Replaces each `${env:NAME}` in a header value with that environment variable's value, read
/// once when the config loads. A missing or unlisted variable is an error naming the field; no
/// error shows the value.
pub(super) fn expand_env(value: &str, path: &str, env: &Env<'_>) -> Result<String, ConfigError> {
    const OPEN: &str = "${env:";
    if !value.contains(OPEN) {
        return Ok(value.to_string());
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(rest.get(..at).unwrap_or_default());
        let after = rest.get(at + OPEN.len()..).unwrap_or_default();
        let Some(end) = after.find('}') else {
            return Err(ConfigError::new(path, "`${env:` is not closed with `}`"));
        };
        let name = after.get(..end).unwrap_or_default();
        if !is_env_name(name) {
            return Err(ConfigError::new(
                path,
                format!("`{name}` is not an environment variable name (letters, digits, `_`)"),
            ));
        }
        out.push_str(&env.get(name, path)?);
        rest = after.get(end + 1..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_are_host_names_or_addresses_with_an_optional_port() {
        for ok in [
            "api.openai.com",
            "my-res.openai.azure.com",
            "vllm.internal:8000",
            "localhost",
            "10.0.0.1:8080",
            "[::1]",
            "[::1]:8443",
        ] {
            assert!(is_authority(ok), "{ok}");
        }
        for bad in [
            "",
            "https://api.openai.com",
            "api.openai.com/v1",
            "api.openai.com:",
            "api.openai.com:0",
            "api.openai.com:70000",
            "a b",
            "-bad.com",
            "bad..com",
            "[::1",
            "[]:80",
            "host:port",
        ] {
            assert!(!is_authority(bad), "{bad}");
        }
    }

    #[test]
    fn env_references_are_replaced_and_a_missing_one_names_the_field_not_a_value() {
        let read = |n: &str| (n == "KEY").then(|| "sk-secret".to_string());
        let env = Env::new(&read, None);
        assert_eq!(
            expand_env("Bearer ${env:KEY}", "p", &env).unwrap(),
            "Bearer sk-secret"
        );
        assert_eq!(expand_env("plain", "p", &env).unwrap(), "plain");
        assert_eq!(
            expand_env("${env:KEY}-${env:KEY}", "p", &env).unwrap(),
            "sk-secret-sk-secret"
        );
        let e = expand_env(
            "Bearer ${env:OTHER}",
            "models[0].headers.authorization",
            &env,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with(
                "models[0].headers.authorization: environment variable `OTHER` is not set"
            ),
            "{e}"
        );
        assert!(expand_env("${env:KEY", "p", &env).is_err());
        assert!(expand_env("${env:1X}", "p", &env).is_err());
    }

    #[test]
    fn query_values_are_percent_encoded_once() {
        assert_eq!(percent_encode("2024-10-21"), "2024-10-21");
        assert_eq!(percent_encode("a b&c=d"), "a%20b%26c%3Dd");
    }
}
