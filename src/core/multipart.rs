//! `multipart/form-data` bodies (audio transcription and translation, image edits and
//! variations): the `model` is a form field, read and rewritten in place. Every other part,
//! the uploaded file included, is forwarded byte for byte.

use std::ops::Range;

/// The boundary of a `multipart/form-data` content type, if it is one.
pub fn boundary(content_type: &str) -> Option<&str> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"'))
            .filter(|b| !b.is_empty() && b.len() <= 200)
    })
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// Every form field of the body: its name and the span of its value.
pub fn fields(body: &[u8], boundary: &str) -> Option<Vec<(String, Range<usize>)>> {
    let delimiter = format!("--{boundary}");
    let next_part = format!("\r\n--{boundary}");
    let mut at = find(body, delimiter.as_bytes(), 0)? + delimiter.len();
    let mut out = Vec::new();
    loop {
        // "--" after a delimiter closes the body.
        if body.get(at..at + 2) == Some(b"--") {
            return Some(out);
        }
        let headers_start = find(body, b"\r\n", at)? + 2;
        let headers_end = find(body, b"\r\n\r\n", headers_start)?;
        let headers = std::str::from_utf8(body.get(headers_start..headers_end)?).ok()?;
        let value_start = headers_end + 4;
        let value_end = find(body, next_part.as_bytes(), value_start)?;
        if let Some(name) = field_name(headers).ok()? {
            out.push((name, value_start..value_end));
        }
        at = value_end + next_part.len();
    }
}

/// The `name` of a part's `Content-Disposition: form-data; name="..."` header.
///
/// `Err` when the part is ambiguous (two disposition headers, two names, or an extended
/// `name*`): a provider could read another field as `model` than the one routed on.
fn field_name(headers: &str) -> Result<Option<String>, ()> {
    let mut dispositions = headers
        .split("\r\n")
        .filter(|l| l.to_ascii_lowercase().starts_with("content-disposition:"));
    let Some(line) = dispositions.next() else {
        return Ok(None);
    };
    if dispositions.next().is_some() {
        return Err(());
    }
    let mut names = line.split(';').filter_map(|p| {
        let (k, v) = p.split_once('=')?;
        let k = k.trim().to_ascii_lowercase();
        (k == "name" || k == "name*").then(|| (k, v.trim().trim_matches('"').to_string()))
    });
    match (names.next(), names.next()) {
        (None, _) => Ok(None),
        (Some((k, v)), None) if k == "name" => Ok(Some(v)),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\x00\x01--XyZ-not-a-delimiter\r\n--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nteam/stt\r\n--XyZ--\r\n";

    #[test]
    fn finds_the_boundary() {
        assert_eq!(boundary("multipart/form-data; boundary=XyZ"), Some("XyZ"));
        assert_eq!(
            boundary("Multipart/Form-Data; charset=x; boundary=\"a b\""),
            Some("a b")
        );
        assert_eq!(boundary("application/json"), None);
        assert_eq!(boundary("multipart/form-data"), None);
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
    fn ambiguous_parts_are_refused() {
        let with =
            |disposition: &str| format!("--b\r\n{disposition}\r\n\r\nv\r\n--b--\r\n").into_bytes();
        let upper = with("Content-Disposition: form-data; NAME=\"model\"");
        assert_eq!(
            fields(&upper, "b").unwrap()[0].0,
            "model",
            "parameter names ignore case"
        );
        for bad in [
            "Content-Disposition: form-data; name=\"a\"; name=\"model\"",
            "Content-Disposition: form-data; name*=utf-8''model",
            "Content-Disposition: form-data; name=\"a\"\r\nContent-Disposition: form-data; name=\"model\"",
        ] {
            assert!(fields(&with(bad), "b").is_none(), "{bad}");
        }
    }

    #[test]
    fn truncated_bodies_are_refused_not_misread() {
        for len in 0..BODY.len() - 4 {
            if let Some(f) = fields(&BODY[..len], "XyZ") {
                assert!(f.iter().all(|(_, r)| r.end <= len));
            }
        }
        assert!(fields(BODY, "Other").is_none());
    }
}
