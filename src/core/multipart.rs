//! `multipart/form-data` bodies (audio transcription and translation, image edits and
//! variations): the `model` is a form field, read and rewritten in place. Every other part,
//! the uploaded file included, is forwarded byte for byte.
//!
//! The provider parses the body again, so the filter must read the same fields it will. The
//! content type's parameters follow RFC 2045 §5.1 (a token or a quoted-string), the body RFC
//! 2046 §5.1.1 (delimiters at the start of a line); what parsers are known to read differently
//! (a repeated parameter, an escape Python's `email.utils.unquote` keeps, a boundary outside
//! `bchars`, a delimiter after a bare LF, a line that starts with the boundary and goes on) is
//! refused as [`Malformed`] rather than guessed at. Every search is `memchr::memmem`, and no
//! byte is searched twice for the same thing: linear in the body.

use crate::core::errors::clip;
use memchr::memmem;
use std::borrow::Cow;
use std::ops::Range;

/// Why an upload cannot be read unambiguously; completes "The request body must be
/// multipart/form-data: …".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    /// A fixed description.
    Because(&'static str),
    /// A content-type or Content-Disposition parameter given twice (its name, lower-cased).
    Repeated(String),
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::Because(why) => f.write_str(why),
            // The client's name last: a clipped one cuts nothing of ours.
            Malformed::Repeated(name) => {
                write!(f, "a parameter appears more than once, `{}`", clip(name))
            }
        }
    }
}

use Malformed::Because;

/// The boundary of a `multipart/form-data` content type: `None` when it is another type.
///
/// RFC 2046 §5.1.1: 1 to 70 `bchars` (digits, letters, `'()+_,-./:=?` and space), not ending
/// in a space. None of them needs a quoted-pair, so a valid boundary is always a slice of
/// `content_type`.
pub fn boundary(content_type: &str) -> Result<Option<&str>, Malformed> {
    let (kind, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return Ok(None);
    }
    let params = parameters(params)?;
    if params.iter().any(|(k, _)| k.starts_with("boundary*")) {
        // RFC 2231's extended form: parsers that decode it and those that do not differ.
        return Err(Because("the boundary is given as an RFC 2231 `boundary*`"));
    }
    let value = params
        .into_iter()
        .find_map(|(k, v)| (k == "boundary").then_some(v))
        .ok_or(Because("the content type has no boundary"))?;
    let Cow::Borrowed(value) = value else {
        return Err(Because(
            "the boundary has a character outside RFC 2046's bchars",
        ));
    };
    let bchar = |b: u8| b.is_ascii_alphanumeric() || b"'()+_,-./:=? ".contains(&b);
    match value.len() {
        0 => Err(Because("the boundary is empty")),
        71.. => Err(Because("the boundary is longer than 70 characters")),
        _ if !value.bytes().all(bchar) || value.ends_with(' ') => Err(Because(
            "the boundary has a character outside RFC 2046's bchars or ends in a space",
        )),
        _ => Ok(Some(value)),
    }
}

/// RFC 2045 §5.1 `token` characters: ASCII, not a control, a space or a `tspecial`.
fn is_token(b: u8) -> bool {
    b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?=".contains(&b)
}

/// The `;`-separated `name=value` parameters of a header value after its first item (RFC
/// 2045 §5.1; whitespace around the separators allowed, as RFC 822 allows it between
/// tokens, and an empty parameter skipped), names lower-cased. A name given twice is refused:
/// Python's `email` returns the first, `cgi`-style parsers the last.
fn parameters(text: &str) -> Result<Vec<(String, Cow<'_, str>)>, Malformed> {
    let mut out: Vec<(String, Cow<'_, str>)> = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix(';') {
            rest = after;
            continue;
        }
        if rest.is_empty() {
            return Ok(out);
        }
        let (name, after) = split_token(rest);
        let after = after.trim_start_matches([' ', '\t']);
        let after = after
            .strip_prefix('=')
            .filter(|_| !name.is_empty())
            .ok_or(Because("a parameter is not `name=value` (RFC 2045 §5.1)"))?;
        let after = after.trim_start_matches([' ', '\t']);
        let (value, after) = match after.strip_prefix('"') {
            Some(quoted) => quoted_string(quoted)?,
            None => match split_token(after) {
                ("", _) => return Err(Because("a parameter has no value (RFC 2045 §5.1)")),
                (token, after) => (Cow::Borrowed(token), after),
            },
        };
        rest = after.trim_start_matches([' ', '\t']);
        if !rest.is_empty() && !rest.starts_with(';') {
            return Err(Because("a parameter is not `name=value` (RFC 2045 §5.1)"));
        }
        let name = name.to_ascii_lowercase();
        if out.iter().any(|(n, _)| *n == name) {
            return Err(Malformed::Repeated(name));
        }
        out.push((name, value));
    }
}

/// The longest token at the start of `text`, and the rest.
fn split_token(text: &str) -> (&str, &str) {
    let end = text
        .bytes()
        .position(|b| !is_token(b))
        .unwrap_or(text.len());
    text.split_at_checked(end).unwrap_or((text, ""))
}

/// A quoted-string's content (`text` starts after its opening quote), and the text after its
/// closing quote.
///
/// RFC 822 lets `\` quote any character, but Python's `email` (which `cgi` and
/// `python-multipart` read parameters with) differs: `utils.unquote` undoes only `\"` and
/// `\\`, and `_parseparam` takes every `\"` for an escaped quote, so in `"a\\"` it reads on
/// past the closing quote. Both are refused: an escape other than `\"` or `\\`, and a
/// closing quote right after an escaped backslash.
fn quoted_string(text: &str) -> Result<(Cow<'_, str>, &str), Malformed> {
    // The content so far when it holds escapes, and where the unescaped rest begins.
    let mut value: Option<String> = None;
    let mut from = 0;
    let mut escaped_backslash = false;
    let mut bytes = text.bytes().enumerate();
    while let Some((i, b)) = bytes.next() {
        match b {
            b'"' if escaped_backslash => {
                return Err(Because(
                    "a quoted string ends in an escaped backslash, which parsers read differently",
                ))
            }
            b'"' => {
                let head = text.get(from..i).unwrap_or_default();
                let content = match value {
                    None => Cow::Borrowed(head),
                    Some(v) => Cow::Owned(v + head),
                };
                return Ok((content, text.get(i + 1..).unwrap_or_default()));
            }
            b'\\' => {
                let Some((j, escaped @ (b'"' | b'\\'))) = bytes.next() else {
                    return Err(Because(
                        "a backslash in a quoted string escapes something other than `\"` or `\\`",
                    ));
                };
                let v = value.get_or_insert_with(String::new);
                v.push_str(text.get(from..i).unwrap_or_default());
                from = j;
                escaped_backslash = escaped == b'\\';
                continue;
            }
            b'\r' | b'\n' => break,
            _ => {}
        }
        escaped_backslash = false;
    }
    Err(Because("a quoted string is not closed"))
}

/// Every form field of the body: its name and the span of its value.
///
/// RFC 2046 §5.1.1: a delimiter is `--boundary` at the start of the body or after CRLF,
/// followed by `--` (the close delimiter) or by optional spaces and CRLF. An occurrence of
/// `--boundary` in the middle of a line is content, except before the first delimiter, where
/// it would be a delimiter not at the start of a line; after a bare CR or LF, or starting a
/// line it does not end, it is refused: parsers disagree whether it delimits.
pub fn fields(body: &[u8], boundary: &str) -> Result<Vec<(String, Range<usize>)>, Malformed> {
    let dash = format!("--{boundary}");
    let mut out = Vec::new();
    // Where the part being read starts, once the first delimiter is behind.
    let mut part: Option<usize> = None;
    for at in memmem::find_iter(body, dash.as_bytes()) {
        let before = at.checked_sub(2).and_then(|s| body.get(s..at));
        let line_start = at == 0 || before == Some(b"\r\n");
        if !line_start {
            let prev = at.checked_sub(1).and_then(|p| body.get(p));
            if matches!(prev, Some(b'\r' | b'\n')) {
                return Err(Because("a boundary follows a bare CR or LF, not CRLF"));
            }
            if part.is_none() {
                return Err(Because(
                    "the first delimiter is not at the start of a line (RFC 2046 §5.1.1)",
                ));
            }
            continue; // content: a part may hold `--boundary` inside a line
        }
        if let Some(start) = part {
            read_part(body, start..at.saturating_sub(2), &mut out)?;
        }
        let after = body.get(at + dash.len()..).unwrap_or_default();
        if after.starts_with(b"--") {
            return Ok(out); // the close delimiter; what follows is the epilogue
        }
        let pad = after
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        if after.get(pad..pad + 2) != Some(b"\r\n") {
            return Err(Because(
                "a line starts with the boundary but is not a delimiter (RFC 2046 §5.1.1)",
            ));
        }
        part = Some(at + dash.len() + pad + 2);
    }
    Err(Because(match part {
        None => "no delimiter of the boundary",
        Some(_) => "the body ends before its close delimiter",
    }))
}

/// Reads the part in `span` of `body` (its headers, a blank line, its value) into `out` if it
/// is a named field.
fn read_part(
    body: &[u8],
    span: Range<usize>,
    out: &mut Vec<(String, Range<usize>)>,
) -> Result<(), Malformed> {
    // `--b\r\n--b`: the CRLF cannot end one delimiter line and start the next.
    let bytes = body
        .get(span.clone())
        .ok_or(Because("a delimiter line has no part after it"))?;
    // No headers at all: the part starts with its blank line.
    let (headers, value_at) = match bytes.strip_prefix(b"\r\n") {
        Some(_) => (&b""[..], 2),
        None => {
            let end = memmem::find(bytes, b"\r\n\r\n")
                .ok_or(Because("a part's headers do not end with a blank line"))?;
            (bytes.get(..end).unwrap_or_default(), end + 4)
        }
    };
    let headers =
        std::str::from_utf8(headers).map_err(|_| Because("a part's headers are not UTF-8"))?;
    if let Some(name) = field_name(headers)? {
        out.push((name, span.start + value_at..span.end));
    }
    Ok(())
}

/// The `name` of a part's `Content-Disposition: form-data; name="..."` header.
///
/// Refused when the part is ambiguous: a header line that is not `Name: value` (a folded
/// line, a space before the colon, a bare CR or LF), two disposition headers, a repeated
/// parameter, or RFC 2231's `name*` (RFC 7578 §4.2 rules it out; parsers that decode it read
/// another name).
fn field_name(headers: &str) -> Result<Option<String>, Malformed> {
    let mut disposition = None;
    for line in headers.split("\r\n").filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .filter(|(n, v)| {
                !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_graphic())
                    && !v.contains(['\r', '\n'])
            })
            .ok_or(Because("a part header is not `Name: value`"))?;
        if name.eq_ignore_ascii_case("content-disposition") && disposition.replace(value).is_some()
        {
            return Err(Because("a part has two Content-Disposition headers"));
        }
    }
    let Some((_, params)) = disposition.and_then(|d| d.split_once(';')) else {
        return Ok(None);
    };
    let params = parameters(params)?;
    if params.iter().any(|(k, _)| k.starts_with("name*")) {
        return Err(Because(
            "a part is named with RFC 2231's `name*` (RFC 7578 §4.2)",
        ));
    }
    Ok(params
        .into_iter()
        .find_map(|(k, v)| (k == "name").then(|| v.into_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\x00\x01--XyZ-not-a-delimiter\r\n--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nteam/stt\r\n--XyZ--\r\n";

    fn problem(content_type: &str) -> String {
        boundary(content_type).unwrap_err().to_string()
    }

    #[test]
    fn finds_the_boundary() {
        assert_eq!(
            boundary("multipart/form-data; boundary=XyZ"),
            Ok(Some("XyZ"))
        );
        assert_eq!(
            boundary("Multipart/Form-Data; charset=x; boundary=\"a b\""),
            Ok(Some("a b"))
        );
        assert_eq!(
            boundary("multipart/form-data ;BOUNDARY = \"x\" ;"),
            Ok(Some("x"))
        );
        assert_eq!(boundary("application/json"), Ok(None));
        assert_eq!(
            boundary("application/json; boundary=a; boundary=b"),
            Ok(None)
        );
        assert!(problem("multipart/form-data").contains("no boundary"));
    }

    #[test]
    fn a_quoted_parameter_is_read_whole() {
        // A naive split on `;` finds `boundary=AAA"` first; the boundary is BBB.
        let ct = "multipart/form-data; charset=\"x; boundary=AAA\"; boundary=BBB";
        assert_eq!(boundary(ct), Ok(Some("BBB")));
        let ct = "multipart/form-data; a=\"q\\\"; boundary=AAA\"; boundary=\"BBB\"";
        assert_eq!(
            boundary(ct),
            Ok(Some("BBB")),
            "an escaped quote does not end it"
        );
    }

    #[test]
    fn a_repeated_parameter_is_refused_naming_it() {
        for ct in [
            "multipart/form-data; boundary=AAA; boundary=BBB",
            "multipart/form-data; boundary=AAA; Boundary=\"AAA\"",
        ] {
            assert_eq!(
                boundary(ct),
                Err(Malformed::Repeated("boundary".into())),
                "{ct}"
            );
        }
        let ct = "multipart/form-data; charset=a; boundary=b; CHARSET=c";
        assert_eq!(problem(ct), "a parameter appears more than once, `charset`");
        assert!(problem("multipart/form-data; boundary=a; boundary*=utf-8''b").contains("2231"));
        let long = format!(
            "multipart/form-data; {0}=a; {0}=b; boundary=c",
            "n".repeat(5000)
        );
        assert!(problem(&long).len() < 400);
    }

    #[test]
    fn a_boundary_must_be_1_to_70_bchars_not_ending_in_a_space() {
        let seventy = "'()+_,-./:=? ".repeat(5) + "0123z";
        assert_eq!(seventy.len(), 70);
        let ct = format!("multipart/form-data; boundary=\"{seventy}\"");
        assert_eq!(boundary(&ct), Ok(Some(seventy.as_str())));
        let ct = format!("multipart/form-data; boundary={}", "b".repeat(71));
        assert!(problem(&ct).contains("longer than 70"));
        for bad in [
            "boundary=\"a@b\"",
            "boundary=\"ab \"",
            "boundary=\"a\\\\b\"",
            "boundary=\"a\\\"b\"",
            "boundary=a%b",
            "boundary=\"é\"",
        ] {
            let ct = format!("multipart/form-data; {bad}");
            assert!(problem(&ct).contains("bchars"), "{bad}: {}", problem(&ct));
        }
        assert!(problem("multipart/form-data; boundary=\"\"").contains("empty"));
    }

    #[test]
    fn malformed_parameters_are_refused() {
        for bad in [
            "boundary",
            "boundary=",
            "=x",
            "boundary=\"AAA",
            "boundary=a b",
            "boundary=\"a\\b\"",
            "boundary=(x)",
            "boundary=a;b",
        ] {
            let ct = format!("multipart/form-data; {bad}");
            assert!(boundary(&ct).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists_fields_with_the_spans_of_their_values() {
        let f = fields(BODY, "XyZ").unwrap();
        assert_eq!(
            f.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["file", "model"]
        );
        assert_eq!(&BODY[f[1].1.clone()], b"team/stt");
        assert_eq!(&BODY[f[0].1.clone()], b"RIFF\x00\x01--XyZ-not-a-delimiter");
    }

    #[test]
    fn a_preamble_padding_an_epilogue_and_a_headerless_part_are_read() {
        let body = b"a preamble line\r\n--b  \r\n\r\nno name\r\n--b\r\nContent-Disposition: form-data; name=model\r\n\r\nm\r\n--b--\r\nepilogue --b\n--b";
        let f = fields(body, "b").unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].0.as_str(), &body[f[0].1.clone()]),
            ("model", &b"m"[..])
        );
    }

    #[test]
    fn delimiters_not_at_the_start_of_a_line_are_refused() {
        let part = "Content-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b--";
        let refused = |body: String, why: &str| {
            let err = fields(body.as_bytes(), "b").unwrap_err().to_string();
            assert!(err.contains(why), "{body:?}: {err}");
        };
        refused(format!("x--b\r\n{part}"), "start of a line");
        refused(format!("x\n--b\r\n{part}"), "bare CR or LF");
        refused(
            format!("--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nv\n--b\r\n{part}"),
            "bare CR or LF",
        );
        refused(
            format!("--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nv\r\n--bx\r\n{part}"),
            "not a delimiter",
        );
        refused(
            format!("--b\r\n{part}").replace("\r\n--b--", ""),
            "ends before",
        );
        refused(format!("--b\r\n--b\r\n{part}"), "no part after it");
        refused("nothing here".into(), "no delimiter");
    }

    #[test]
    fn ambiguous_parts_are_refused() {
        let with =
            |disposition: &str| format!("--b\r\n{disposition}\r\n\r\nv\r\n--b--\r\n").into_bytes();
        let upper = with("Content-Disposition: form-data; NAME=\"model\"");
        assert_eq!(
            fields(&upper, "b").unwrap()[0].0,
            "model",
            "parameter names ignore case"
        );
        let quoted =
            with("content-disposition: form-data; filename=\"x; name=model\"; name=\"a\\\"b\"");
        assert_eq!(
            fields(&quoted, "b").unwrap()[0].0,
            "a\"b",
            "quoted strings read whole"
        );
        let backslash = with("Content-Disposition: form-data; name=\"a\\\\b\"");
        assert_eq!(fields(&backslash, "b").unwrap()[0].0, "a\\b");
        let both =
            with("Content-Disposition: form-data; name=\"f\"; filename=\"a\"; filename*=utf-8''a");
        assert_eq!(
            fields(&both, "b").unwrap()[0].0,
            "f",
            "filename* is not a name"
        );
        for bad in [
            "Content-Disposition: form-data; name=\"a\"; name=\"model\"",
            "Content-Disposition: form-data; name*=utf-8''model",
            "Content-Disposition: form-data; name=\"a\"; name*0=model",
            "Content-Disposition: form-data; name=\"a\"\r\nContent-Disposition: form-data; name=\"model\"",
            "Content-Disposition : form-data; name=\"model\"",
            "X-A: b\r\n Content-Disposition: form-data; name=\"model\"",
            "X-A: b\nContent-Disposition: form-data; name=\"model\"",
            "Content-Disposition: form-data; name=\"mo\\del\"",
            "Content-Disposition: form-data; name=\"a\\\\\"; filename=\"; name=model\"",
            "Content-Disposition: form-data; name=\"model",
            "no colon",
        ] {
            assert!(fields(&with(bad), "b").is_err(), "{bad}");
        }
        assert!(fields(b"--b\r\n\xff: x\r\n\r\nv\r\n--b--", "b").is_err());
    }

    #[test]
    fn truncated_bodies_are_refused_not_misread() {
        for len in 0..BODY.len() - 4 {
            if let Ok(f) = fields(&BODY[..len], "XyZ") {
                assert!(f.iter().all(|(_, r)| r.end <= len));
            }
        }
        assert!(fields(BODY, "Other").is_err());
    }

    #[test]
    fn a_part_may_hold_the_boundary_inside_its_lines() {
        // Each mid-line `--bb` is found once and passed over: the file stays one field.
        let mut body = b"--bb\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n".to_vec();
        body.extend(b"x--bb".repeat(200_000));
        body.extend(
            b"\r\n--bb\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--bb--",
        );
        let f = fields(&body, "bb").unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].1.len(), 1_000_000);
    }
}
