//! A typed reader over one JSON object of the plugin config that knows its field path.
//!
//! serde alone reports "invalid type: string, expected u32 at line 1 column 80", which does not
//! say *which* weight was wrong. Reading each object through [`Fields`] gives every error the
//! full path (`virtual_models[0].routing_config.load_balance_targets[2].weight: ...`), and
//! [`Fields::finish`] rejects keys nobody read, so an unimplemented or misspelt field is never
//! silently ignored. This runs once per config load, never on the request path.

use serde_json::{Map, Value};
use std::fmt;

/// A config error: the field path and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the offending field, e.g. `models[1].cluster`; empty for the root.
    pub path: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

impl ConfigError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Joins a parent path and a key (`a.b`), or starts a path at the root.
pub fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Names a JSON value's type for error messages.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One key and string value of a string map, with its path for errors.
pub struct Entry<'a> {
    /// The key as written.
    pub key: &'a str,
    /// The value.
    pub value: &'a str,
    /// The path of this entry.
    pub path: String,
}

/// One JSON object being read; tracks which keys were consumed.
pub struct Fields<'a> {
    path: String,
    map: &'a Map<String, Value>,
    read: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    /// Starts reading `value` at `path`; it must be an object.
    pub fn new(path: String, value: &'a Value) -> Result<Self, ConfigError> {
        match value {
            Value::Object(map) => Ok(Fields {
                path,
                map,
                read: Vec::new(),
            }),
            other => Err(ConfigError::new(
                path,
                format!("expected an object, got {}", type_name(other)),
            )),
        }
    }

    /// The path of one of its fields.
    pub fn field_path(&self, key: &str) -> String {
        child_path(&self.path, key)
    }

    /// An error at one of its fields.
    pub fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.field_path(key), message)
    }

    /// Marks `key` as read and returns its value unless absent or null.
    pub fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.read.push(key);
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// Whether `key` is present, without marking it read.
    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// An optional string.
    pub fn opt_str(&mut self, key: &'static str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => {
                Err(self.error(key, format!("expected a string, got {}", type_name(other))))
            }
        }
    }

    /// A required, non-empty string.
    pub fn str(&mut self, key: &'static str) -> Result<&'a str, ConfigError> {
        match self.opt_str(key)? {
            None => Err(self.error(key, "is required")),
            Some("") => Err(self.error(key, "must not be empty")),
            Some(s) => Ok(s),
        }
    }

    /// An optional non-negative integer no larger than `max`.
    pub fn opt_u64(&mut self, key: &'static str, max: u64) -> Result<Option<u64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n <= max => Ok(Some(n)),
                _ => Err(self.error(key, format!("expected an integer from 0 to {max}, got {v}"))),
            },
        }
    }

    /// An optional boolean.
    pub fn opt_bool(&mut self, key: &'static str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.error(
                key,
                format!("expected true or false, got {}", type_name(other)),
            )),
        }
    }

    /// An optional number from 0.0 to 1.0.
    pub fn opt_fraction(&mut self, key: &'static str) -> Result<Option<f32>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(n) if (0.0..=1.0).contains(&n) => Ok(Some(n as f32)),
                _ => Err(self.error(key, format!("expected a number from 0.0 to 1.0, got {v}"))),
            },
        }
    }

    /// An optional duration written like `3s`, `500ms` or `1m30s`, in milliseconds.
    pub fn opt_duration_ms(&mut self, key: &'static str) -> Result<Option<u64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => crate::core::health::retry_after::duration_ms(s)
                .map(Some)
                .ok_or_else(|| {
                    self.error(
                        key,
                        format!("expected a duration such as \"3s\" or \"500ms\", got \"{s}\""),
                    )
                }),
            Some(other) => Err(self.error(
                key,
                format!(
                    "expected a duration such as \"3s\", got {}",
                    type_name(other)
                ),
            )),
        }
    }

    /// An optional list of HTTP status codes, as strings (`"429"`, as the vendor documents write
    /// them) or numbers.
    pub fn opt_status_codes(
        &mut self,
        key: &'static str,
    ) -> Result<Option<crate::core::status_set::StatusSet>, ConfigError> {
        let Some(items) = self.opt_array(key)? else {
            return Ok(None);
        };
        let mut set = crate::core::status_set::StatusSet::default();
        for (path, v) in items {
            let code = match v {
                // A class such as "5xx": every code from 500 to 599.
                Value::String(s) if s.len() == 3 && s.ends_with("xx") => {
                    match s.as_bytes().first() {
                        Some(d @ b'1'..=b'5') => {
                            let base = u16::from(d - b'0') * 100;
                            (base..base + 100).for_each(|c| set.insert(c));
                            continue;
                        }
                        _ => None,
                    }
                }
                Value::String(s) => s.trim().parse::<u16>().ok(),
                Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
                _ => None,
            };
            match code {
                Some(c) if (100..=599).contains(&c) => set.insert(c),
                _ => {
                    return Err(ConfigError::new(
                        path,
                        format!("expected an HTTP status code such as \"429\", got {v}"),
                    ))
                }
            }
        }
        Ok(Some(set))
    }

    /// An optional object read as is: its keys with their JSON values.
    pub fn opt_raw_object(
        &mut self,
        key: &'static str,
    ) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => {
                Err(self.error(key, format!("expected an object, got {}", type_name(other))))
            }
        }
    }

    /// An optional array, returned with the path of each element.
    pub fn opt_array(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Vec<(String, &'a Value)>>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => {
                let base = self.field_path(key);
                Ok(Some(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (format!("{base}[{i}]"), v))
                        .collect(),
                ))
            }
            Some(other) => {
                Err(self.error(key, format!("expected an array, got {}", type_name(other))))
            }
        }
    }

    /// An optional object, to be read with its own [`Fields`].
    pub fn opt_object(&mut self, key: &'static str) -> Result<Option<Fields<'a>>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => Fields::new(self.field_path(key), v).map(Some),
        }
    }

    /// An optional object whose values are all strings, in the order written.
    pub fn opt_string_map(&mut self, key: &'static str) -> Result<Vec<Entry<'a>>, ConfigError> {
        let Some(value) = self.get(key) else {
            return Ok(Vec::new());
        };
        let base = self.field_path(key);
        let Value::Object(map) = value else {
            return Err(ConfigError::new(
                base,
                format!("expected an object, got {}", type_name(value)),
            ));
        };
        map.iter()
            .map(|(k, v)| {
                let path = child_path(&base, k);
                match v {
                    Value::String(s) => Ok(Entry {
                        key: k.as_str(),
                        value: s.as_str(),
                        path,
                    }),
                    other => Err(ConfigError::new(
                        path,
                        format!("expected a string, got {}", type_name(other)),
                    )),
                }
            })
            .collect()
    }

    /// Fails on any key that was not read. Keys listed in `not_yet` get a "not supported yet"
    /// message (a field of the vendor documents this version does not implement); others are
    /// unknown.
    pub fn finish(self, not_yet: &[&str]) -> Result<(), ConfigError> {
        for key in self.map.keys() {
            if self.read.iter().any(|r| r == key) {
                continue;
            }
            if not_yet.contains(&key.as_str()) {
                return Err(ConfigError::new(
                    self.field_path(key),
                    "is not supported yet by this version of Switchboard; remove it",
                ));
            }
            // In the order the fields are read, which follows the docs; no sort (a sort is
            // kilobytes of .wasm for one error message).
            let mut known: Vec<&str> = Vec::with_capacity(self.read.len());
            for name in &self.read {
                if !known.contains(name) {
                    known.push(name);
                }
            }
            return Err(ConfigError::new(
                self.field_path(key),
                format!("unknown field; expected one of: {}", known.join(", ")),
            ));
        }
        Ok(())
    }
}
