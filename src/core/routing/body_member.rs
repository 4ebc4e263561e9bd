//! A string member of the JSON request body named by a `body` identifier's path: a top-level
//! member (`prompt_cache_key`) or one level down (`metadata.user_id`).
//!
//! The body was read once already ([`crate::core::request::inspect`]): every top-level member
//! is known with the span of its value. A top-level key is that span, unquoted; a two-level
//! key reads only its parent's span (one member's bytes, not the body again) for the child.
//! Only a string is a key: any other value is a missing identifier, so `{"user_id": 1}` and a
//! request without it are alike. A path naming a member inside a string value (`"messages":
//! "... \"prompt_cache_key\": ..."`) finds nothing: only members of objects are looked at.

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::ops::Range;

/// [`string_at`] as bytes: a session key or caller identifier read from the body.
pub fn bytes_at<'b>(
    body: &'b [u8],
    fields: &[(Cow<'_, str>, Range<usize>)],
    path: &str,
) -> Option<Cow<'b, [u8]>> {
    Some(match string_at(body, fields, path)? {
        Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
        Cow::Owned(s) => Cow::Owned(s.into_bytes()),
    })
}

/// The string at `path` (`field` or `parent.child`) of `body`, whose top-level members are
/// `fields`; `None` when absent or not a string.
pub fn string_at<'b>(
    body: &'b [u8],
    fields: &[(Cow<'_, str>, Range<usize>)],
    path: &str,
) -> Option<Cow<'b, str>> {
    let (top, child) = match path.split_once('.') {
        Some((top, child)) => (top, Some(child)),
        None => (path, None),
    };
    let (_, span) = fields.iter().find(|(k, _)| k == top)?;
    let raw = std::str::from_utf8(body.get(span.clone())?).ok()?;
    match child {
        None => json_string(raw),
        Some(child) if raw.starts_with('{') => {
            let mut de = serde_json::Deserializer::from_str(raw);
            let found = Member(child).deserialize(&mut de).ok()??;
            json_string(found)
        }
        Some(_) => None,
    }
}

/// A raw JSON value as a string, unescaped only when it holds escapes; `None` if not a string.
fn json_string(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
}

/// The raw value of member `.0` of a JSON object (the first, if repeated: a routing key only).
struct Member<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for Member<'_> {
    type Value = Option<&'de str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Member<'_> {
    type Value = Option<&'de str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(Key(key)) = map.next_key()? {
            if found.is_none() && key == self.0 {
                let raw: &'de serde_json::value::RawValue = map.next_value()?;
                found = Some(raw.get());
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// A key, borrowed unless it holds escapes (a bare `Cow<str>` always copies in serde).
#[derive(Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::request::inspect;

    fn read(body: &str, path: &str) -> Option<String> {
        let inspected = inspect(body.as_bytes()).unwrap();
        string_at(body.as_bytes(), &inspected.fields, path).map(|c| c.into_owned())
    }

    #[test]
    fn a_top_level_string_member_is_read() {
        let body = r#"{"model": "m", "prompt_cache_key": "sess-1234"}"#;
        assert_eq!(read(body, "prompt_cache_key").as_deref(), Some("sess-1234"));
        assert_eq!(read(body, "absent"), None);
    }

    #[test]
    fn a_two_level_member_is_read_from_its_parent_only() {
        let body = r#"{"model": "m", "metadata": {"other": {"user_id": "no"}, "user_id": "user_abc_session_1"}}"#;
        assert_eq!(
            read(body, "metadata.user_id").as_deref(),
            Some("user_abc_session_1")
        );
        assert_eq!(read(body, "metadata.absent"), None);
        // The parent is not an object: nothing.
        let flat = r#"{"model": "m", "metadata": "user_id"}"#;
        assert_eq!(read(flat, "metadata.user_id"), None);
    }

    #[test]
    fn values_that_are_not_strings_are_missing() {
        let body = r#"{"model": "m", "prompt_cache_key": 42, "metadata": {"user_id": {"a": "b"}}, "n": null}"#;
        assert_eq!(read(body, "prompt_cache_key"), None);
        assert_eq!(read(body, "metadata.user_id"), None);
        assert_eq!(read(body, "n"), None);
    }

    #[test]
    fn escapes_are_decoded_in_keys_and_values() {
        let body = r#"{"model": "m", "prompt_cache_\u006bey": "a\"b\u00e9", "metadata": {"user\u005fid": "x\\y"}}"#;
        assert_eq!(read(body, "prompt_cache_key").as_deref(), Some("a\"bé"));
        assert_eq!(read(body, "metadata.user_id").as_deref(), Some("x\\y"));
    }

    #[test]
    fn a_key_inside_a_string_value_is_not_a_member() {
        let body = r#"{"model": "m", "messages": [{"role": "user", "content": "{\"prompt_cache_key\": \"evil\"}"}], "metadata": {"note": "\"user_id\": \"evil\""}}"#;
        assert_eq!(read(body, "prompt_cache_key"), None);
        assert_eq!(read(body, "metadata.user_id"), None);
    }
}
