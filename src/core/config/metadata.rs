//! The root fields that add metadata to every request: `default_metadata` and
//! `gateway_location` (TrueFoundry virtual models, "Metadata-based target filtering").

use super::fields::{ConfigError, Fields};
use super::upstream::{expand_env, Env};

/// `default_metadata`: merged into every request's metadata, winning over the header.
pub(super) fn compile_default_metadata(
    root: &mut Fields<'_>,
) -> Result<Vec<(String, String)>, ConfigError> {
    Ok(root
        .opt_string_map("default_metadata")?
        .into_iter()
        .map(|e| (e.key.to_string(), e.value.to_string()))
        .collect())
}

/// `gateway_location: {region, zone}` (each may be `${env:NAME}`): the gateway's own location
/// as the metadata keys `gateway_region` and `gateway_zone`. The .wasm also reads Envoy's node
/// locality, which wins where it names a key; the native build cannot read it (Envoy 1.40's
/// dynamic-modules ABI), so this is how it learns where it runs.
pub(super) fn compile_gateway_location(
    root: &mut Fields<'_>,
    env: &Env<'_>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(mut f) = root.opt_object("gateway_location")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (field, key) in [("region", "gateway_region"), ("zone", "gateway_zone")] {
        if let Some(text) = f.opt_str(field)? {
            let value = expand_env(text, &f.field_path(field), env)?;
            if !value.is_empty() {
                out.push((key.to_string(), value));
            }
        }
    }
    f.finish(&[])?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::core::config::Config;

    fn parse(extra: &str) -> Result<Config, String> {
        let json =
            format!(r#"{{"models": [{{"name": "m", "cluster": "c", "model": "m"}}]{extra}}}"#);
        let env = |name: &str| (name == "ZONE").then(|| "eu-west-1b".to_string());
        Config::parse_with_env(json.as_bytes(), &env).map_err(|e| e.to_string())
    }

    #[test]
    fn the_gateway_location_becomes_its_two_metadata_keys() {
        let c =
            parse(r#", "gateway_location": {"region": "eu-west", "zone": "${env:ZONE}"}"#).unwrap();
        assert_eq!(
            c.gateway_metadata,
            [
                ("gateway_region".to_string(), "eu-west".to_string()),
                ("gateway_zone".to_string(), "eu-west-1b".to_string())
            ]
        );
        // Envoy's locality wins where it names a key (the .wasm); the config fills the rest.
        let c = c.with_gateway_location(Some("us-east".to_string()), None);
        assert_eq!(
            c.gateway_metadata,
            [
                ("gateway_region".to_string(), "us-east".to_string()),
                ("gateway_zone".to_string(), "eu-west-1b".to_string())
            ]
        );
        assert!(parse("").unwrap().gateway_metadata.is_empty());
    }

    #[test]
    fn a_bad_gateway_location_names_its_field() {
        for (extra, path) in [
            (
                r#", "gateway_location": {"region": 1}"#,
                "gateway_location.region",
            ),
            (
                r#", "gateway_location": {"city": "x"}"#,
                "gateway_location.city",
            ),
            (
                r#", "gateway_location": {"zone": "${env:NOPE}"}"#,
                "gateway_location.zone",
            ),
        ] {
            let e = parse(extra).unwrap_err();
            assert!(e.starts_with(path), "{extra}: {e}");
        }
    }
}
