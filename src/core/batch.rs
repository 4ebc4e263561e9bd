//! The Batch API and virtual models (TrueFoundry virtual models, "FAQ"): a batch runs on one
//! provider hours later, with no live answer to fall back from, so it needs a real catalog model. A
//! batch input file uploaded to `/v1/files` (`purpose=batch`) or a `/v1/batches` request that names
//! a virtual model gets a 400 saying so; everything else about batches passes through untouched.

use crate::core::config::{Config, Named};
use crate::core::errors::ErrorReply;
use crate::core::multipart;
use serde::Deserialize;

/// Whether a POST to `path` may carry batch input that names models.
pub fn is_batch_path(path: &str) -> bool {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let path = path.strip_prefix("/v1").unwrap_or(path);
    matches!(path, "/files" | "/batches")
}

#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    body: Option<LineBody>,
}

#[derive(Deserialize)]
struct LineBody {
    #[serde(default)]
    model: Option<String>,
}

/// Refuses batch input that names a virtual model.
pub fn check(
    path: &str,
    content_type: &str,
    body: &[u8],
    config: &Config,
) -> Result<(), ErrorReply> {
    let refuse = |model: &str| match config.lookup(model) {
        Some(Named::Virtual(..)) => Err(ErrorReply::batch_needs_catalog_model(model)),
        _ => Ok(()),
    };
    // An upload the filter cannot read is not its to judge: the provider answers it. A content
    // type that claims multipart/form-data ambiguously is read as not multipart, so a JSON
    // `/v1/batches` request is still checked.
    let lines: &[u8] = match multipart::boundary(content_type).ok().flatten() {
        Some(boundary) => {
            let Ok(fields) = multipart::fields(body, boundary) else {
                return Ok(());
            };
            let value = |name: &str| {
                fields
                    .iter()
                    .find(|(n, _)| n == name)
                    .and_then(|(_, span)| body.get(span.clone()))
            };
            if value("purpose") != Some(b"batch") {
                return Ok(());
            }
            value("file").unwrap_or_default()
        }
        // A JSON `/v1/batches` request: one line, checked like a batch line.
        None if path.trim_end_matches('/').ends_with("/batches") => body,
        None => return Ok(()),
    };
    for line in lines.split(|b| *b == b'\n') {
        let Ok(parsed) = serde_json::from_slice::<Line>(line) else {
            continue;
        };
        if let Some(m) = parsed.model.as_deref() {
            refuse(m)?;
        }
        if let Some(m) = parsed.body.as_ref().and_then(|b| b.model.as_deref()) {
            refuse(m)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse(
            br#"{"models": [{"name": "openai/gpt-4o", "cluster": "c", "model": "gpt-4o", "visibility": "public"}],
              "virtual_models": [{"name": "team/chat", "model_types": ["chat"], "routing_config": {
                "type": "weight-based-routing", "load_balance_targets": [{"target": "openai/gpt-4o", "weight": 100}]}}]}"#,
        )
        .unwrap()
    }

    fn upload(purpose: &str, jsonl: &str) -> Vec<u8> {
        format!(
            "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n{jsonl}\r\n--b--\r\n"
        )
        .into_bytes()
    }

    const CT: &str = "multipart/form-data; boundary=b";

    #[test]
    fn a_batch_file_naming_a_virtual_model_is_refused() {
        let jsonl = "{\"custom_id\":\"1\",\"body\":{\"model\":\"openai/gpt-4o\"}}\n{\"custom_id\":\"2\",\"body\":{\"model\":\"team/chat\"}}";
        let e = check("/v1/files", CT, &upload("batch", jsonl), &config()).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.body.contains("team/chat") && e.body.contains("catalog model"));
    }

    #[test]
    fn catalog_models_and_other_uploads_pass() {
        let ok = "{\"body\":{\"model\":\"openai/gpt-4o\"}}";
        assert!(check("/v1/files", CT, &upload("batch", ok), &config()).is_ok());
        let virtual_line = "{\"body\":{\"model\":\"team/chat\"}}";
        assert!(check(
            "/v1/files",
            CT,
            &upload("fine-tune", virtual_line),
            &config()
        )
        .is_ok());
        assert!(check(
            "/v1/batches",
            "application/json",
            br#"{"input_file_id":"f","endpoint":"/v1/chat/completions"}"#,
            &config()
        )
        .is_ok());
        assert_eq!(
            check(
                "/v1/batches",
                "application/json",
                br#"{"model":"team/chat"}"#,
                &config()
            )
            .unwrap_err()
            .status,
            400
        );
        assert!(
            is_batch_path("/v1/files")
                && is_batch_path("/batches")
                && !is_batch_path("/v1/files/f-1")
        );
    }
}
