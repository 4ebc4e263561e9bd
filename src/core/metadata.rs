//! Request metadata: the `x-switchboard-metadata` header (a JSON object of strings) merged with
//! the config's `default_metadata`, and `metadata_match` against it.
//!
//! TrueFoundry virtual models, "Metadata-based target filtering": default gateway metadata
//! overrides the request's value for a shared key; `metadata_match` needs every pair to match
//! exactly (AND), and filtering runs before load balancing and stickiness.
//!
//! The same section's gateway location metadata (`tfy_gateway_region`, `tfy_gateway_zone`,
//! added by the gateway that handled the request) is `gateway_region` and `gateway_zone` here,
//! from Envoy's node locality or the config's `gateway_location`. It is gateway metadata, which
//! "overrides request value for overlapping keys": it wins over the header and
//! `default_metadata`, and a client's header never sets either key, so a client cannot route
//! as if it came through another region's gateway.

use crate::core::config::Config;
use crate::core::errors::ErrorReply;
use crate::core::headers::Headers;
use std::borrow::Cow;

/// The keys only the gateway sets: its location.
pub const GATEWAY_KEYS: [&str; 2] = ["gateway_region", "gateway_zone"];

/// Resolved metadata of one request. Values from the config (`default_metadata`, the gateway's
/// location) are borrowed from it: a request that only inherits them copies nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata<'c>(Vec<(Cow<'c, str>, Cow<'c, str>)>);

impl<'c> Metadata<'c> {
    /// Parses the header (absent: empty; the gateway's own keys dropped) and applies the
    /// defaults, which win on a shared key. A header that is not a JSON object of strings is
    /// the client's error: a 400, never an empty map in silence.
    pub fn resolve(
        header: Option<&[u8]>,
        defaults: &'c [(String, String)],
    ) -> Result<Metadata<'c>, ErrorReply> {
        let mut pairs: Vec<(Cow<'c, str>, Cow<'c, str>)> = match header {
            None => Vec::new(),
            Some(raw) => serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(raw)
                .map_err(|_| ErrorReply::invalid_metadata("it is not a JSON object"))?
                .into_iter()
                .filter(|(k, _)| !GATEWAY_KEYS.contains(&k.as_str()))
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => Ok((Cow::Owned(k), Cow::Owned(s))),
                    _ => Err(ErrorReply::metadata_value_not_string(&k)),
                })
                .collect::<Result<_, _>>()?,
        };
        for (k, v) in defaults {
            match pairs.iter_mut().find(|(key, _)| key == k) {
                Some(pair) => pair.1 = Cow::Borrowed(v),
                None => pairs.push((Cow::Borrowed(k), Cow::Borrowed(v))),
            }
        }
        Ok(Metadata(pairs))
    }

    /// Sets the gateway's location pairs over whatever is there: the highest source.
    pub fn at_gateway(mut self, location: &'c [(String, String)]) -> Metadata<'c> {
        for (k, v) in location {
            match self.0.iter_mut().find(|(key, _)| key == k) {
                Some(pair) => pair.1 = Cow::Borrowed(v),
                None => self.0.push((Cow::Borrowed(k), Cow::Borrowed(v))),
            }
        }
        self
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// Whether every pair of `required` is present with the same value (empty: always).
    pub fn matches(&self, required: &[(String, String)]) -> bool {
        required
            .iter()
            .all(|(k, v)| self.get(k) == Some(v.as_str()))
    }
}

/// The request's metadata: the metadata header's, under `default_metadata`, over the
/// gateway's location.
pub fn request_metadata<'a>(
    config: &'a Config,
    headers: &'a Headers,
) -> Result<Metadata<'a>, ErrorReply> {
    let header = headers.get(&config.header_names.metadata);
    Ok(Metadata::resolve(header, &config.default_metadata)?.at_gateway(&config.gateway_metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn header_and_defaults_merge_with_defaults_winning() {
        let defaults = pairs(&[("region", "us"), ("zone", "a")]);
        let m = Metadata::resolve(Some(br#"{"region":"eu","tier":"free"}"#), &defaults).unwrap();
        assert_eq!(
            m.get("region"),
            Some("us"),
            "the default wins on a shared key"
        );
        assert_eq!(m.get("tier"), Some("free"));
        assert_eq!(m.get("zone"), Some("a"));
        assert_eq!(m.get("missing"), None);
        assert!(
            matches!(
                m.0.iter().find(|(k, _)| k == "zone"),
                Some((Cow::Borrowed(_), Cow::Borrowed(_)))
            ),
            "a default is borrowed from the config, not copied"
        );
        assert_eq!(Metadata::resolve(None, &[]).unwrap(), Metadata::default());
    }

    #[test]
    fn the_gateways_location_wins_and_a_client_never_sets_it() {
        let gateway = pairs(&[
            ("gateway_region", "eu-west"),
            ("gateway_zone", "eu-west-1a"),
        ]);
        let m = Metadata::resolve(Some(br#"{"tier":"free"}"#), &[])
            .unwrap()
            .at_gateway(&gateway);
        assert_eq!(m.get("gateway_region"), Some("eu-west"));
        assert_eq!(m.get("gateway_zone"), Some("eu-west-1a"));
        assert!(
            m.0.iter()
                .filter(|(k, _)| k.starts_with("gateway_"))
                .all(|(k, v)| matches!((k, v), (Cow::Borrowed(_), Cow::Borrowed(_)))),
            "the gateway's location is borrowed from the config on every request, not copied"
        );
        let header = br#"{"gateway_region":"us-east","gateway_zone":"us-east-1a","tier":"x"}"#;
        let defaults = pairs(&[("gateway_zone", "z9")]);
        let m = Metadata::resolve(Some(header), &defaults)
            .unwrap()
            .at_gateway(&gateway);
        assert_eq!(m.get("gateway_region"), Some("eu-west"), "over the header");
        assert_eq!(
            m.get("gateway_zone"),
            Some("eu-west-1a"),
            "over the defaults"
        );
        // Without a known location, the header still cannot set it; the operator's defaults can.
        let m = Metadata::resolve(Some(header), &defaults)
            .unwrap()
            .at_gateway(&[]);
        assert_eq!(m.get("gateway_region"), None);
        assert_eq!(m.get("gateway_zone"), Some("z9"));
        assert_eq!(m.get("tier"), Some("x"));
    }

    #[test]
    fn malformed_header_is_a_400() {
        for bad in [&b"{"[..], b"[]", br#"{"a": 1}"#, br#""x""#, b"\xff"] {
            assert_eq!(
                Metadata::resolve(Some(bad), &[]).unwrap_err().status,
                400,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_huge_key_is_echoed_clipped() {
        let key = "k".repeat(100_000);
        let header = format!(r#"{{"{key}": 1}}"#);
        let e = Metadata::resolve(Some(header.as_bytes()), &[]).unwrap_err();
        assert!(e.body.len() < 1024, "{}", e.body.len());
        let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{}…` is not a string", "k".repeat(256))));
    }

    #[test]
    fn matching_is_an_and_of_exact_pairs() {
        let m = Metadata::resolve(Some(br#"{"region":"us","tier":"enterprise"}"#), &[]).unwrap();
        assert!(m.matches(&[]));
        assert!(m.matches(&pairs(&[("region", "us"), ("tier", "enterprise")])));
        assert!(!m.matches(&pairs(&[("region", "us"), ("tier", "free")])));
        assert!(!m.matches(&pairs(&[("region", "US")])));
        assert!(!m.matches(&pairs(&[("zone", "a")])));
    }
}
