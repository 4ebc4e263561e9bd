//! Reading what routing needs from a request body, and rewriting it for a target by splicing
//! bytes.
//!
//! The body is read as a list of top-level keys with the spans of their values: one pass that
//! validates the whole document without building a tree (a SIMD scan that skips string
//! contents, serde_json's borrowed [`RawValue`]s for what the scan leaves to it). Each value is a
//! slice of the original body, so its position is known and a rewrite (the `model`, a target's
//! `override_params`) is a splice: every other byte the client sent reaches the provider as is.

use crate::core::errors::ErrorReply;
use crate::core::headers::Headers;
use crate::core::json_scan;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;

/// A top-level key, borrowed from the body unless it holds escapes.
#[derive(Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

/// Every top-level field of an object body, in order, with the span of its value in the body
/// (a raw value borrows from the body it was read from).
type Fields<'a> = Vec<(Cow<'a, str>, Range<usize>)>;

/// Reads [`Fields`] from `body`, straight into one list.
struct TopLevel<'b>(&'b [u8]);

impl<'de> serde::de::DeserializeSeed<'de> for TopLevel<'de> {
    type Value = Fields<'de>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TopLevel<'de> {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(8);
        while let Some(Key(key)) = map.next_key()? {
            let raw: &'de RawValue = map.next_value()?;
            let span = span_in(self.0, raw.get())
                .ok_or_else(|| serde::de::Error::custom("could not locate a top-level field"))?;
            out.push((key, span));
        }
        Ok(out)
    }
}

/// Where `text`, a slice of `body`, sits in it. Addresses, not bytes: comparing the bytes
/// would read the whole body again; checked so a surprise cannot mis-splice.
fn span_in(body: &[u8], text: &str) -> Option<Range<usize>> {
    let start = (text.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start.checked_add(text.len())?;
    (end <= body.len()).then_some(start..end)
}

/// What the filter learnt from a JSON request body.
#[derive(Debug, PartialEq, Eq)]
pub struct Inspected<'a> {
    /// The requested model name, unescaped.
    pub model: Cow<'a, str>,
    /// Where the `model` value (quotes included) sits in the body.
    pub model_span: Range<usize>,
    /// `"stream": true`: the answer comes as server-sent events.
    pub stream: bool,
    /// Every top-level field with the span of its value.
    pub fields: Vec<(Cow<'a, str>, Range<usize>)>,
    /// Where the object's closing `}` sits.
    pub end: usize,
    /// The body is `multipart/form-data`: `model` is a form field holding the bare name.
    pub multipart: bool,
}

/// The top-level field `name` of an inspected body as raw JSON, borrowed from `body`.
pub fn raw_field<'b>(
    body: &'b [u8],
    fields: &[(Cow<'_, str>, Range<usize>)],
    name: &str,
) -> Option<&'b RawValue> {
    let (_, span) = fields.iter().find(|(k, _)| k == name)?;
    serde_json::from_slice(body.get(span.clone())?).ok()
}

/// Refuses a compressed body: the filter reads and rewrites the JSON as sent, so a gzip body
/// would only ever be `invalid_json`. `identity` is no encoding.
pub fn check_content_encoding(headers: &Headers) -> Result<(), ErrorReply> {
    match headers.get("content-encoding") {
        None => Ok(()),
        Some(v) if v.trim_ascii().eq_ignore_ascii_case(b"identity") => Ok(()),
        Some(v) => Err(ErrorReply::unsupported_content_encoding(
            std::str::from_utf8(v).unwrap_or_default().trim(),
        )),
    }
}

/// Reads the top-level `model` of a JSON object body.
///
/// Errors are the client's: malformed JSON, a non-object body, a duplicate, missing or
/// non-string `model` each give a 400 reply.
pub fn inspect(body: &[u8]) -> Result<Inspected<'_>, ErrorReply> {
    let fields = top_level(body)?;
    if let Some(key) = repeated_key(&fields) {
        return Err(ErrorReply::duplicate_key(key));
    }
    let value = |span: &Range<usize>| body.get(span.clone()).unwrap_or_default();
    let (mut model, mut stream) = (None, false);
    for (key, span) in &fields {
        match key.as_ref() {
            "model" if value(span) != b"null" => model = Some(span.clone()),
            "stream" => stream = value(span) == b"true",
            _ => {}
        }
    }
    let model_span = model.ok_or_else(ErrorReply::missing_model)?;
    let name = model_name(body, &model_span)?;
    let end = body
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .filter(|i| body.get(*i) == Some(&b'}'))
        .ok_or_else(|| ErrorReply::invalid_json("the body must be a JSON object"))?;
    Ok(Inspected {
        model: name,
        model_span,
        stream,
        fields,
        end,
        multipart: false,
    })
}

/// The body's top-level fields with their spans; the 400 of a body that is not a UTF-8 JSON
/// object.
///
/// The scanner ([`json_scan`]) reads a valid object without decoding string contents, and
/// checks it is UTF-8 as it goes; whatever it does not accept goes to serde_json, which
/// accepts the same documents and gives the error, so every reply stays serde_json's by
/// construction.
fn top_level(body: &[u8]) -> Result<Fields<'_>, ErrorReply> {
    // serde would also read a struct from a JSON array; only an object is a request.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
                Ok(_) => ErrorReply::invalid_json("the body must be a JSON object"),
                Err(e) => describe(&e),
            },
        );
    }
    if let Some(fields) = json_scan::top_level_members(body) {
        return Ok(fields);
    }
    fields_by_serde(body, utf8(body)?)
}

/// `body` as text, or the 400 that names its first byte that is not UTF-8.
fn utf8(body: &[u8]) -> Result<&str, ErrorReply> {
    // One UTF-8 check of the whole body: serde_json then reads it as text and checks no key
    // or raw value again (from bytes it checks each of them on its own). simdutf8 checks 16
    // bytes a step (Wasm SIMD, or SSE/AVX natively) where the standard library checks 4 in the
    // .wasm.
    simdutf8::basic::from_utf8(body).map_err(|_| {
        // Only a bad body pays for the position of its first bad byte.
        let at = std::str::from_utf8(body)
            .err()
            .map_or(0, |e| e.valid_up_to());
        ErrorReply::invalid_json(&format!("the body is not UTF-8 (byte {at})"))
    })
}

/// The top-level fields of `whole` (the text of `body`) read by serde_json as keys and borrowed
/// raw values: the reference the scanner is tested against, and the error of a bad body.
pub(crate) fn fields_by_serde<'b>(
    body: &'b [u8],
    whole: &'b str,
) -> Result<Fields<'b>, ErrorReply> {
    let mut reader = serde_json::Deserializer::from_str(whole);
    serde::de::DeserializeSeed::deserialize(TopLevel(body), &mut reader)
        .and_then(|fields| reader.end().map(|()| fields))
        .map_err(|e| describe(&e))
}

/// The `model` value at `span` as a name: a JSON string, unescaped only when it has escapes.
fn model_name<'a>(body: &'a [u8], span: &Range<usize>) -> Result<Cow<'a, str>, ErrorReply> {
    // The span was read from a body checked to be UTF-8; a name is a few bytes to check again.
    let text = body
        .get(span.clone())
        .and_then(crate::core::text::utf8)
        .ok_or_else(ErrorReply::model_not_string)?;
    if !text.starts_with('"') {
        return Err(ErrorReply::model_not_string());
    }
    Ok(match text.get(1..text.len() - 1) {
        // No escapes: the name is the bytes between the quotes.
        Some(inner) if !inner.contains('\\') => Cow::Borrowed(inner),
        _ => Cow::Owned(
            serde_json::from_str::<String>(text).map_err(|_| ErrorReply::model_not_string())?,
        ),
    })
}

/// The first top-level key that appears twice (first by where its second copy sits), compared
/// decoded, so `"str\u0065am"` is `"stream"`.
///
/// RFC 8259 §4 leaves which copy a parser reads to the parser (serde_json's maps and Python's
/// `json` keep the last, the scan above sees both), and I-JSON (RFC 7493 §2.3) forbids them: a
/// provider could read another `model` or `stream` than the one routed on, so any is refused.
fn repeated_key<'f>(fields: &'f [(Cow<'_, str>, Range<usize>)]) -> Option<&'f str> {
    // Pairwise for the usual handful of keys; sorted above that, so a body of 100k keys costs
    // n log n, not n².
    const PAIRWISE_UP_TO: usize = 16;
    if fields.len() <= PAIRWISE_UP_TO {
        return fields.iter().enumerate().find_map(|(i, (key, _))| {
            let earlier = fields.get(..i)?;
            earlier
                .iter()
                .any(|(k, _)| k == key)
                .then_some(key.as_ref())
        });
    }
    let mut keys: Vec<(&str, usize)> = fields
        .iter()
        .enumerate()
        .map(|(i, (key, _))| (key.as_ref(), i))
        .collect();
    keys.sort_unstable();
    keys.windows(2)
        .filter_map(|pair| match pair {
            [(a, _), (b, second)] if a == b => Some((*second, *b)),
            _ => None,
        })
        .min()
        .map(|(_, key)| key)
}

/// Reads the `model` form field of a `multipart/form-data` body.
pub fn inspect_multipart<'a>(body: &'a [u8], boundary: &str) -> Result<Inspected<'a>, ErrorReply> {
    let parts = crate::core::multipart::fields(body, boundary)
        .map_err(|malformed| ErrorReply::invalid_multipart(&malformed.to_string()))?;
    // Form fields may repeat (`timestamp_granularities[]`, several files), but two of the ones
    // the filter reads would let the provider read another than the filter did.
    for read in ["model", "stream"] {
        if parts
            .iter()
            .filter(|(name, _)| name == read)
            .nth(1)
            .is_some()
        {
            return Err(ErrorReply::invalid_multipart(&format!(
                "the `{read}` field appears more than once"
            )));
        }
    }
    let (_, span) = parts
        .iter()
        .find(|(name, _)| name == "model")
        .ok_or_else(ErrorReply::missing_model)?;
    let model = body
        .get(span.clone())
        .and_then(crate::core::text::utf8)
        .filter(|m| !m.is_empty())
        .ok_or_else(ErrorReply::model_not_string)?;
    let stream = parts
        .iter()
        .any(|(n, s)| n == "stream" && body.get(s.clone()) == Some(b"true"));
    Ok(Inspected {
        model: Cow::Borrowed(model),
        model_span: span.clone(),
        stream,
        fields: parts.into_iter().map(|(n, s)| (Cow::Owned(n), s)).collect(),
        end: body.len(),
        multipart: true,
    })
}

/// Turns a serde_json error into a client-facing 400 without echoing body content.
fn describe(e: &serde_json::Error) -> ErrorReply {
    use serde_json::error::Category;
    match e.classify() {
        Category::Eof => ErrorReply::invalid_json("the body ends before the JSON document does"),
        _ => ErrorReply::invalid_json(&format!(
            "syntax error at line {}, column {}",
            e.line(),
            e.column()
        )),
    }
}

/// Where a body's parts sit, kept (owned) for rewriting it again for another target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// The `model` value.
    pub model_span: Range<usize>,
    /// The closing `}` of the object.
    pub end: usize,
    /// Top-level fields by key; kept only when some target overrides parameters.
    pub fields: Vec<(String, Range<usize>)>,
    /// A multipart body: the model goes in bare, and parameters are not overridden.
    pub multipart: bool,
    /// Edits every target's body gets (a Responses turn's own ids swapped back in).
    pub extra: Vec<Edit>,
}

impl Inspected<'_> {
    /// The layout of the body, with the field spans only if `with_fields`.
    pub fn layout(&self, with_fields: bool) -> Layout {
        Layout {
            model_span: self.model_span.clone(),
            end: self.end,
            fields: if with_fields {
                self.fields
                    .iter()
                    .map(|(k, span)| (k.to_string(), span.clone()))
                    .collect()
            } else {
                Vec::new()
            },
            multipart: self.multipart,
            extra: Vec::new(),
        }
    }
}

/// The edits that rewrite the body for a target: `model_json` as the model, and each
/// `(key, raw JSON)` of `overrides` in place of that top-level field, or added before the
/// closing brace when the client did not send it. `Some(None)` when nothing changes; `None` if
/// a span does not fit the body.
///
/// A JSON body that would shrink keeps its length: spaces after the new model value make up
/// the difference. Virtual model names are usually longer than the provider's, so the request
/// keeps its `content-length` and the filter need not set it (one host call fewer).
pub fn rewrite(
    body: &[u8],
    layout: &Layout,
    model_json: &[u8],
    overrides: &[(String, String)],
) -> Option<Option<Edits>> {
    let same_model = body.get(layout.model_span.clone())? == model_json;
    if same_model && overrides.is_empty() && layout.extra.is_empty() {
        return Some(None);
    }
    // Room for the padding a shorter name gets (`padded`), so it takes no second allocation.
    let mut with = Vec::with_capacity(model_json.len().max(layout.model_span.len()));
    with.extend_from_slice(model_json);
    let mut edits = vec![Edit {
        span: layout.model_span.clone(),
        with,
    }];
    edits.extend(layout.extra.iter().cloned());
    for (key, value) in overrides {
        let mut found = false;
        for (_, span) in layout.fields.iter().filter(|(k, _)| k == key) {
            edits.push(Edit {
                span: span.clone(),
                with: value.as_bytes().to_vec(),
            });
            found = true;
        }
        if !found {
            let key_json = serde_json::to_string(key).ok()?;
            edits.push(Edit {
                span: layout.end..layout.end,
                with: format!(",{key_json}:{value}").into_bytes(),
            });
        }
    }
    let edits = Edits::new(edits, body.len())?;
    if layout.multipart {
        // A form field's value is its bytes: spaces would change the model name.
        return Some(Some(edits));
    }
    Some(Some(edits.padded(body, &layout.model_span)))
}

/// The size of the slices Envoy reads a body into (its default slice size). An adapter hands a
/// long edited body to Envoy in parts of at most this size: a part that size can reuse the
/// memory of a slice Envoy just drained, where one large part takes new memory while that sits
/// idle.
pub const ENVOY_SLICE: usize = 16 * 1024;

/// One change to a body: the bytes in `span` replaced by `with` (inserted when it is empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The bytes of the client's body replaced.
    pub span: Range<usize>,
    /// What takes their place.
    pub with: Vec<u8>,
}

/// A body rewrite as edits in body order, none overlapping. Kept as edits rather than a new
/// body: the router's attempt applies them to Envoy's own buffer, so a large body is never
/// copied inside the filter; a dispatched attempt builds the whole body with [`Edits::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edits(Vec<Edit>);

impl Edits {
    /// The edits sorted, if they fit a body of `len` bytes without overlapping.
    pub fn new(mut edits: Vec<Edit>, len: usize) -> Option<Edits> {
        edits.sort_by_key(|e| e.span.start);
        let mut at = 0;
        for e in &edits {
            if e.span.start < at || e.span.end < e.span.start || e.span.end > len {
                return None;
            }
            at = e.span.end;
        }
        Some(Edits(edits))
    }

    /// The length of `body` once edited.
    pub fn new_len(&self, body: &[u8]) -> usize {
        self.len_after(body.len())
    }

    /// The length of a body of `len` bytes once edited.
    pub fn len_after(&self, len: usize) -> usize {
        self.0
            .iter()
            .fold(len, |n, e| (n + e.with.len()).saturating_sub(e.span.len()))
    }

    /// The edits, in body order.
    pub fn as_slice(&self) -> &[Edit] {
        &self.0
    }

    /// The same edits, with JSON whitespace after the value replacing `span` so that `body`
    /// does not get shorter.
    fn padded(mut self, body: &[u8], span: &Range<usize>) -> Edits {
        if let Some(short) = body
            .len()
            .checked_sub(self.new_len(body))
            .filter(|n| *n > 0)
        {
            if let Some(e) = self.0.iter_mut().find(|e| e.span == *span) {
                e.with.resize(e.with.len() + short, b' ');
            }
        }
        self
    }

    /// The edited bytes from the start of `body` to the end of the last edit, as pieces in
    /// order, and where that end is: the bytes after it stay as they are.
    pub fn head<'a>(&'a self, body: &'a [u8]) -> Option<(Vec<&'a [u8]>, usize)> {
        let mut pieces = Vec::with_capacity(2 * self.0.len());
        let mut at = 0;
        for e in &self.0 {
            pieces.push(body.get(at..e.span.start)?);
            pieces.push(e.with.as_slice());
            at = e.span.end;
        }
        Some((pieces, at))
    }

    /// Appends the edited bytes from the start of `body` to the end of the last edit to `out`
    /// (what [`Edits::head`] returns as pieces, joined without a list of them); returns where
    /// that end is.
    pub fn write_head(&self, body: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        let mut at = 0;
        for e in &self.0 {
            out.extend_from_slice(body.get(at..e.span.start)?);
            out.extend_from_slice(&e.with);
            at = e.span.end;
        }
        Some(at)
    }

    /// Where the last edit ends in the unedited body (0 without edits).
    pub fn head_end(&self) -> usize {
        self.0.last().map_or(0, |e| e.span.end)
    }

    /// [`Edits::head`] as parts of at most [`ENVOY_SLICE`] bytes, in order (or last first,
    /// reversed), borrowed from `body` and the edits; and where the head ends.
    pub fn head_parts<'a>(
        &'a self,
        body: &'a [u8],
    ) -> Option<(impl DoubleEndedIterator<Item = &'a [u8]>, usize)> {
        let (pieces, end) = self.head(body)?;
        let parts = pieces.into_iter().flat_map(|p| p.chunks(ENVOY_SLICE));
        Some((parts, end))
    }

    /// The whole edited body as parts of at most [`ENVOY_SLICE`] bytes, in order, borrowed from
    /// `body` and the edits: no copy of the body is made.
    pub fn parts<'a>(&'a self, body: &'a [u8]) -> Option<impl Iterator<Item = &'a [u8]>> {
        let (head, end) = self.head_parts(body)?;
        Some(head.chain(body.get(end..)?.chunks(ENVOY_SLICE)))
    }

    /// The whole edited body.
    pub fn apply(&self, body: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(self.new_len(body));
        let end = self.write_head(body, &mut out)?;
        out.extend_from_slice(body.get(end..)?);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_body_is_refused_with_415_and_identity_is_no_encoding() {
        let with =
            |v: &str| check_content_encoding(&Headers::from_pairs([("content-encoding", v)]));
        assert!(check_content_encoding(&Headers::default()).is_ok());
        assert!(with("identity").is_ok() && with(" Identity ").is_ok());
        let e = with("gzip").unwrap_err();
        assert_eq!(e.status, 415);
        let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
        assert_eq!(v["error"]["code"], "unsupported_content_encoding");
        assert!(v["error"]["message"].as_str().unwrap().contains("`gzip`"));
        let odd = with("\"}x{").unwrap_err();
        assert!(!odd.body.contains("}x{"), "odd values are not echoed");
    }

    fn code(body: &str) -> (u16, String) {
        let e = inspect(body.as_bytes()).unwrap_err();
        let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
        (
            e.status,
            v["error"]["message"].as_str().unwrap().to_string(),
        )
    }

    #[test]
    fn the_top_level_model_is_read_past_every_escape_and_a_model_inside_a_string() {
        // Every JSON escape, multi-byte UTF-8 (2, 3 and 4 bytes, and as escapes with a
        // surrogate pair and a lone surrogate) and `"model"` inside string values, before the
        // real top-level `model`.
        let prompt = r#"q \" \\ \/ \b \f \n \r \t \u0041 \u00e9 \ud83d\ude00 \ud800 é € 𝄞 \"model\": \"evil\""#;
        let body = format!(
            r#"{{"messages":[{{"role":"user","content":"{prompt}","model":"nested"}}],"x":"\"model\":\"no\"",
               "model" : "gpt-4o" , "stream":true}}"#
        );
        let got = inspect(body.as_bytes()).unwrap();
        assert_eq!(got.model, "gpt-4o");
        assert_eq!(&body[got.model_span.clone()], "\"gpt-4o\"");
        assert!(got.stream);
        let keys: Vec<&str> = got.fields.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["messages", "x", "model", "stream"]);
        // The scanner, not the fallback, read it.
        assert!(json_scan::top_level_members(body.as_bytes()).is_some());
    }

    #[test]
    fn finds_model_and_its_span() {
        let body = br#"{"messages":[{"role":"user","content":"hi \"model\": x"}], "model" : "a/b" ,"n":1}"#;
        let i = inspect(body).unwrap();
        assert_eq!(i.model, "a/b");
        assert_eq!(&body[i.model_span.clone()], br#""a/b""#);
        assert!(matches!(i.model, Cow::Borrowed(_)));
    }

    #[test]
    fn reads_the_stream_flag() {
        assert!(inspect(br#"{"model":"a","stream":true}"#).unwrap().stream);
        assert!(!inspect(br#"{"model":"a","stream":false}"#).unwrap().stream);
        assert!(!inspect(br#"{"model":"a","stream":"true"}"#).unwrap().stream);
        assert!(!inspect(br#"{"model":"a"}"#).unwrap().stream);
    }

    #[test]
    fn nested_model_fields_are_not_the_top_level_model() {
        let body = br#"{"metadata":{"model":"nested"},"model":"top"}"#;
        assert_eq!(inspect(body).unwrap().model, "top");
        assert_eq!(code(r#"{"metadata":{"model":"nested"}}"#).0, 400);
    }

    #[test]
    fn escaped_model_names_are_unescaped() {
        let body = br#"{"model":"a\/b\u0041"}"#;
        let i = inspect(body).unwrap();
        assert_eq!(i.model, "a/bA");
        assert_eq!(&body[i.model_span], br#""a\/b\u0041""#);
    }

    #[test]
    fn missing_null_or_non_string_model_is_a_400() {
        assert_eq!(
            code(r#"{"messages":[]}"#),
            (400, "You must provide a model parameter.".into())
        );
        assert_eq!(code(r#"{"model":null}"#).0, 400);
        assert_eq!(
            code(r#"{"model":5}"#),
            (400, "The `model` field must be a string.".into())
        );
        assert_eq!(
            code(r#"{"model":["a"]}"#).1,
            "The `model` field must be a string."
        );
        assert_eq!(code(r#"{"model":{"a":1}}"#).0, 400);
    }

    #[test]
    fn malformed_bodies_are_400s_that_say_why() {
        assert!(code(r#"{"model":"a""#).1.contains("ends before"));
        assert!(code(r#"{"model":"a",}"#)
            .1
            .contains("syntax error at line 1"));
        assert!(code(r#"[{"model":"a"}]"#)
            .1
            .contains("must be a JSON object"));
        assert!(code(r#""model""#).1.contains("must be a JSON object"));
        assert!(code(r#"{"model":"a","model":"b"}"#)
            .1
            .contains("more than once"));
        assert!(code(r#"{"model":"a"} trailing"#).1.contains("syntax error"));
        assert_eq!(code("").0, 400);
        assert_eq!(inspect(&[0xff, 0xfe, b'{']).unwrap_err().status, 400);
        assert_eq!(inspect(b"{\"model\":\"\xff\"}").unwrap_err().status, 400);
    }

    #[test]
    fn any_top_level_key_given_twice_is_refused_naming_it() {
        let param = |body: &str| {
            let e = inspect(body.as_bytes()).unwrap_err();
            let v: serde_json::Value = serde_json::from_str(&e.body).unwrap();
            assert_eq!(
                (e.status, v["error"]["code"].as_str()),
                (400, Some("invalid_json"))
            );
            v["error"]["param"].as_str().unwrap().to_string()
        };
        assert_eq!(
            param(r#"{"model":"a","stream":false,"stream":true}"#),
            "stream"
        );
        assert_eq!(
            param(r#"{"model":"a","stream":false,"str\u0065am":true}"#),
            "stream"
        );
        assert_eq!(param(r#"{"model":null,"model":"a"}"#), "model");
        assert_eq!(param(r#"{"model":"a","n":1,"user":"u","n":2}"#), "n");
        assert_eq!(
            code(r#"{"model":"a","stream":true,"stream":true}"#).1,
            "The request body is not valid JSON: the `stream` field appears more than once."
        );
        // Nested objects are the provider's to read: only top-level keys route.
        let nested = br#"{"model":"a","metadata":{"k":"1","k":"2"},"messages":[{"x":1,"x":2}]}"#;
        assert_eq!(inspect(nested).unwrap().model, "a");
    }

    #[test]
    fn many_top_level_keys_are_checked_in_n_log_n() {
        let body = |extra: &str| {
            let keys: String = (0..100_000).map(|i| format!(r#""k{i}":0,"#)).collect();
            format!(r#"{{{keys}{extra}"model":"a"}}"#)
        };
        assert_eq!(inspect(body("").as_bytes()).unwrap().model, "a");
        // Named: the key whose second copy comes first, as below 16 keys.
        let e = inspect(body(r#""k99999":1,"k7":1,"#).as_bytes()).unwrap_err();
        assert!(e.body.contains("`k99999`"), "{}", e.body);
    }

    #[test]
    fn deeply_nested_bodies_do_not_overflow_the_stack() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        // Skipped fields are walked iteratively: deep but valid JSON is fine.
        let deep = format!("{{\"model\":\"a\",\"x\":{}}}", nest(100_000));
        assert_eq!(inspect(deep.as_bytes()).unwrap().model, "a");
        let deep_model = format!("{{\"model\":{}}}", nest(100_000));
        assert_eq!(inspect(deep_model.as_bytes()).unwrap_err().status, 400);
        let unbalanced = format!("{{\"model\":\"a\",\"x\":{}", "[".repeat(100_000));
        assert_eq!(inspect(unbalanced.as_bytes()).unwrap_err().status, 400);
    }

    #[test]
    fn rewrite_replaces_model_and_overridden_fields_and_adds_missing_ones() {
        let body = br#"{"model":"vm", "temperature": 1.0, "messages": [{"temperature": 9}] }"#;
        let i = inspect(body).unwrap();
        let layout = i.layout(true);
        let overrides = vec![
            ("temperature".to_string(), "0.2".to_string()),
            ("max_tokens".to_string(), "64".to_string()),
        ];
        let edits = rewrite(body, &layout, br#""gpt-4o""#, &overrides)
            .unwrap()
            .unwrap();
        let out = edits.apply(body).unwrap();
        assert_eq!(edits.new_len(body), out.len());
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"gpt-4o", "temperature": 0.2, "messages": [{"temperature": 9}] ,"max_tokens":64}"#
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["max_tokens"], 64);
        // The head is everything up to the added field; the closing brace stays in Envoy.
        let (pieces, end) = edits.head(body).unwrap();
        assert_eq!(&body[end..], b"}");
        assert_eq!(pieces.concat(), &out[..out.len() - 1]);
        // Nothing to change: no copy.
        assert_eq!(rewrite(body, &layout, br#""vm""#, &[]), Some(None));
        // Without field spans, an override is added rather than replaced (callers keep them).
        assert_eq!(i.layout(false).fields.len(), 0);
    }

    #[test]
    fn a_json_body_that_would_shrink_keeps_its_length() {
        let body = br#"{"messages":[], "model": "my-group/production-chat", "n": 1}"#;
        let layout = inspect(body).unwrap().layout(true);
        let edits = rewrite(body, &layout, br#""gpt-4o""#, &[])
            .unwrap()
            .unwrap();
        let out = edits.apply(body).unwrap();
        assert_eq!(out.len(), body.len());
        assert_eq!(edits.new_len(body), body.len());
        let padded = format!(
            r#"{{"messages":[], "model": "gpt-4o"{}, "n": 1}}"#,
            " ".repeat(18)
        );
        assert_eq!(std::str::from_utf8(&out).unwrap(), padded);
        assert_eq!(inspect(&out).unwrap().model, "gpt-4o");
        // An override that shortens a field is made up for after the model, too.
        let shorter = vec![("n".to_string(), "2".to_string())];
        let body = br#"{"model":"a/b","n":100}"#;
        let layout = inspect(body).unwrap().layout(true);
        let out = rewrite(body, &layout, br#""c""#, &shorter)
            .unwrap()
            .unwrap()
            .apply(body)
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"c"    ,"n":2}"#
        );
        // A longer body stays longer: it needs its new content-length.
        let edits = rewrite(body, &layout, br#""a-much-longer-name""#, &[])
            .unwrap()
            .unwrap();
        assert_eq!(edits.new_len(body), body.len() + 15);
    }

    #[test]
    fn a_multipart_model_or_stream_field_given_twice_is_refused_and_others_may_repeat() {
        let form = |fields: &[(&str, &str)]| {
            let mut out = String::new();
            for (name, value) in fields {
                out += &format!(
                    "--b\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
                );
            }
            (out + "--b--\r\n").into_bytes()
        };
        for read in ["model", "stream"] {
            let body = form(&[("model", "m"), (read, "true"), (read, "false")]);
            let e = inspect_multipart(&body, "b").unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e
                .body
                .contains(&format!("the `{read}` field appears more than once")));
        }
        let granularities = form(&[
            ("model", "m"),
            ("timestamp_granularities[]", "word"),
            ("timestamp_granularities[]", "segment"),
        ]);
        assert_eq!(inspect_multipart(&granularities, "b").unwrap().model, "m");
    }

    #[test]
    fn a_multipart_model_field_is_never_padded() {
        let body = b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nmy-group/whisper\r\n--b--\r\n";
        let layout = inspect_multipart(body, "b").unwrap().layout(false);
        let out = rewrite(body, &layout, b"whisper-1", &[])
            .unwrap()
            .unwrap()
            .apply(body)
            .unwrap();
        assert!(out.windows(13).any(|w| w == b"whisper-1\r\n--"));
        assert_eq!(out.len(), body.len() - 7);
    }

    #[test]
    fn edits_must_fit_the_body_and_not_overlap() {
        let edit = |span: Range<usize>| Edit {
            span,
            with: b"x".to_vec(),
        };
        assert!(
            Edits::new(vec![edit(4..6), edit(0..2)], 6).is_some(),
            "sorted"
        );
        assert!(
            Edits::new(vec![edit(0..3), edit(2..4)], 6).is_none(),
            "overlap"
        );
        assert!(Edits::new(vec![edit(5..7)], 6).is_none(), "past the end");
        let edits = Edits::new(vec![edit(4..6), edit(0..2), edit(3..3)], 6).unwrap();
        assert_eq!(edits.apply(b"abcdef").unwrap(), b"xcxdx");
        assert_eq!(edits.new_len(b"abcdef"), 5);
        // The head (up to the last edit's end) joined, as the body edit hands it to Envoy.
        let mut head = b">".to_vec();
        assert_eq!(edits.write_head(b"abcdef", &mut head), Some(6));
        assert_eq!(head, b">xcxdx");
        assert_eq!(edits.head_end(), 6);
        let one = Edits::new(vec![edit(1..2)], 6).unwrap();
        let mut head = Vec::new();
        assert_eq!(one.write_head(b"abcdef", &mut head), Some(2));
        assert_eq!((head.as_slice(), one.head_end()), (&b"ax"[..], 2));
        let none = Edits::new(Vec::new(), 6).unwrap();
        assert_eq!(
            (none.write_head(b"abcdef", &mut head), none.head_end()),
            (Some(0), 0)
        );
    }

    #[test]
    fn a_long_body_goes_out_in_slice_sized_parts_that_join_to_the_edited_body() {
        // A 1 MB prompt before the model, as the OpenAI SDK sends it, and an added field.
        let prompt = "lorem ipsum ".repeat(90_000);
        let body =
            format!(r#"{{"messages":[{{"role":"user","content":"{prompt}"}}],"model":"vm"}}"#);
        let body = body.as_bytes();
        let layout = inspect(body).unwrap().layout(true);
        let overrides = vec![("max_tokens".to_string(), "64".to_string())];
        let edits = rewrite(body, &layout, br#""gpt-4o""#, &overrides)
            .unwrap()
            .unwrap();
        let parts: Vec<&[u8]> = edits.parts(body).unwrap().collect();
        assert!(parts.iter().all(|p| p.len() <= ENVOY_SLICE));
        assert!(parts.len() > body.len() / ENVOY_SLICE);
        assert_eq!(parts.concat(), edits.apply(body).unwrap());
        // Borrowed, not copied: the prompt's parts point into the client's body.
        let inside = |p: &&[u8]| body.as_ptr_range().contains(&p.as_ptr());
        assert!(parts.iter().filter(|p| inside(p)).count() >= body.len() / ENVOY_SLICE);
        // An edit that ends the body leaves an empty head piece and tail: they make no part.
        let short = Edits::new(
            vec![Edit {
                span: 0..2,
                with: b"x".to_vec(),
            }],
            2,
        )
        .unwrap();
        let parts: Vec<&[u8]> = short.parts(b"ab").unwrap().collect();
        assert_eq!(parts, [b"x"]);
    }
}
