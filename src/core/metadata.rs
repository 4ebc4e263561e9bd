//! Request metadata: the `x-switchboard-metadata` header (a JSON object of strings) merged with
//! the config's `default_metadata`, and `metadata_match` against it.
//!
//! TrueFoundry seed, "Metadata-based target filtering": default gateway metadata overrides the
//! request's value for a shared key; `metadata_match` needs every pair to match exactly (AND),
//! and filtering runs before load balancing and stickiness.
//!
//! The same section's gateway location metadata (`tfy_gateway_region`, `tfy_gateway_zone`,
//! added by the gateway that handled the request) is `gateway_region` and `gateway_zone` here,
//! from Envoy's node locality; they hold only where neither the header nor `default_metadata`
//! gives the key, so a client or the operator can still route as if from elsewhere.

use crate::core::errors::ErrorReply;

/// Resolved metadata of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata(Vec<(String, String)>);

impl Metadata {
    /// Parses the header (absent: empty) and applies the defaults, which win on a shared key.
    /// A header that is not a JSON object of strings is the client's error: a 400, never an
    /// empty map in silence.
    pub fn resolve(
        header: Option<&[u8]>,
        defaults: &[(String, String)],
    ) -> Result<Metadata, ErrorReply> {
        let mut pairs: Vec<(String, String)> = match header {
            None => Vec::new(),
            Some(raw) => serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(raw)
                .map_err(|_| ErrorReply::invalid_metadata("it is not a JSON object"))?
                .into_iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => Ok((k, s)),
                    _ => Err(ErrorReply::invalid_metadata(&format!(
                        "the value of `{k}` is not a string"
                    ))),
                })
                .collect::<Result<_, _>>()?,
        };
        for (k, v) in defaults {
            match pairs.iter_mut().find(|(key, _)| key == k) {
                Some(pair) => pair.1.clone_from(v),
                None => pairs.push((k.clone(), v.clone())),
            }
        }
        Ok(Metadata(pairs))
    }

    /// Adds the pairs of `lower` whose keys are not set yet: sources below the header and the
    /// defaults in precedence (the gateway's location).
    pub fn beneath(mut self, lower: &[(String, String)]) -> Metadata {
        for (k, v) in lower {
            if self.get(k).is_none() {
                self.0.push((k.clone(), v.clone()));
            }
        }
        self
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether every pair of `required` is present with the same value (empty: always).
    pub fn matches(&self, required: &[(String, String)]) -> bool {
        required
            .iter()
            .all(|(k, v)| self.get(k) == Some(v.as_str()))
    }
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
        let m = Metadata::resolve(
            Some(br#"{"region":"eu","tier":"free"}"#),
            &pairs(&[("region", "us"), ("zone", "a")]),
        )
        .unwrap();
        assert_eq!(
            m.get("region"),
            Some("us"),
            "the default wins on a shared key"
        );
        assert_eq!(m.get("tier"), Some("free"));
        assert_eq!(m.get("zone"), Some("a"));
        assert_eq!(m.get("missing"), None);
        assert_eq!(Metadata::resolve(None, &[]).unwrap(), Metadata::default());
    }

    #[test]
    fn gateway_location_holds_only_where_header_and_defaults_are_silent() {
        let gateway = pairs(&[
            ("gateway_region", "eu-west"),
            ("gateway_zone", "eu-west-1a"),
        ]);
        let m = Metadata::resolve(Some(br#"{"tier":"free"}"#), &[])
            .unwrap()
            .beneath(&gateway);
        assert_eq!(m.get("gateway_region"), Some("eu-west"));
        assert_eq!(m.get("gateway_zone"), Some("eu-west-1a"));
        let m = Metadata::resolve(
            Some(br#"{"gateway_region":"us-east"}"#),
            &pairs(&[("gateway_zone", "z9")]),
        )
        .unwrap()
        .beneath(&gateway);
        assert_eq!(m.get("gateway_region"), Some("us-east"), "the header wins");
        assert_eq!(m.get("gateway_zone"), Some("z9"), "default_metadata wins");
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
    fn matching_is_an_and_of_exact_pairs() {
        let m = Metadata::resolve(Some(br#"{"region":"us","tier":"enterprise"}"#), &[]).unwrap();
        assert!(m.matches(&[]));
        assert!(m.matches(&pairs(&[("region", "us"), ("tier", "enterprise")])));
        assert!(!m.matches(&pairs(&[("region", "us"), ("tier", "free")])));
        assert!(!m.matches(&pairs(&[("region", "US")])));
        assert!(!m.matches(&pairs(&[("zone", "a")])));
    }
}
