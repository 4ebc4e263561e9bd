//! The attempts' clusters as the priority-group cluster specifier reads them: a
//! `google.protobuf.Value` list of groups `{name, clusters: [{cluster_name, weight}]}`, one group
//! per attempt, serialized and base64-encoded for `header_to_metadata`'s `PROTOBUF_VALUE` type.

use crate::core::seal::base64_encode;

/// `google.protobuf.Value` field numbers.
const NUMBER_VALUE: u32 = 2;
const STRING_VALUE: u32 = 3;
const STRUCT_VALUE: u32 = 5;
const LIST_VALUE: u32 = 6;

/// The header value naming `clusters` in attempt order.
pub fn groups_header<'a>(clusters: impl Iterator<Item = &'a str>) -> String {
    let mut list = Vec::new();
    for (n, cluster) in clusters.enumerate() {
        let one = {
            let mut c = Vec::new();
            entry(&mut c, "cluster_name", &string_value(cluster));
            entry(&mut c, "weight", &number_value(1.0));
            struct_value(&c)
        };
        let mut group = Vec::new();
        entry(
            &mut group,
            "name",
            &string_value(&format!("attempt{}", n + 1)),
        );
        entry(&mut group, "clusters", &list_value(&[one]));
        // ListValue.values = 1
        field(&mut list, 1, &struct_value(&group));
    }
    let mut value = Vec::new();
    field(&mut value, LIST_VALUE, &list);
    base64_encode(&value)
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A length-delimited field.
fn field(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    varint(out, u64::from(number) << 3 | 2);
    varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// One `Struct.fields` map entry (field 1: key = 1, value = 2).
fn entry(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    let mut e = Vec::new();
    field(&mut e, 1, key.as_bytes());
    field(&mut e, 2, value);
    field(out, 1, &e);
}

fn string_value(s: &str) -> Vec<u8> {
    let mut v = Vec::new();
    field(&mut v, STRING_VALUE, s.as_bytes());
    v
}

fn number_value(n: f64) -> Vec<u8> {
    let mut v = Vec::new();
    varint(&mut v, u64::from(NUMBER_VALUE) << 3 | 1);
    v.extend_from_slice(&n.to_le_bytes());
    v
}

fn struct_value(fields: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    field(&mut v, STRUCT_VALUE, fields);
    v
}

/// A `Value` holding a list of the given `Value`s.
fn list_value(values: &[Vec<u8>]) -> Vec<u8> {
    let mut list = Vec::new();
    for value in values {
        field(&mut list, 1, value);
    }
    let mut v = Vec::new();
    field(&mut v, LIST_VALUE, &list);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_groups_encode_as_the_protobuf_value_envoy_reads() {
        // The bytes Python's reference encoder (research/router-path/pb_value.py, checked
        // against Envoy 1.40's header_to_metadata) gives for
        // [{"name": "attempt1", "clusters": [{"cluster_name": "a", "weight": 1}]},
        //  {"name": "attempt2", "clusters": [{"cluster_name": "b", "weight": 1}]}].
        let expected = "MqwBClQqUgoSCgRuYW1lEgoaCGF0dGVtcHQxCjwKCGNsdXN0ZXJzEjAyLgosKioKEwoMY2x1c3Rlcl9uYW1lEgMaAWEKEwoGd2VpZ2h0EgkRAAAAAAAA8D8KVCpSChIKBG5hbWUSChoIYXR0ZW1wdDIKPAoIY2x1c3RlcnMSMDIuCiwqKgoTCgxjbHVzdGVyX25hbWUSAxoBYgoTCgZ3ZWlnaHQSCREAAAAAAADwPw==";
        assert_eq!(groups_header(["a", "b"].into_iter()), expected);
    }
}
