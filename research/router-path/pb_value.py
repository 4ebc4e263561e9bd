"""Encodes a JSON-like value as a serialized google.protobuf.Value, base64: the form
header_to_metadata's PROTOBUF_VALUE type reads from a header (what a .wasm would write)."""

from __future__ import annotations

import base64
import struct


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def value(v) -> bytes:
    if isinstance(v, bool):
        return _varint(4 << 3) + _varint(int(v))
    if isinstance(v, (int, float)):
        return _varint(2 << 3 | 1) + struct.pack("<d", float(v))
    if isinstance(v, str):
        return _field(3, v.encode())
    if isinstance(v, dict):
        entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, value(x))) for k, x in v.items())
        return _field(5, entries)
    if isinstance(v, list):
        return _field(6, b"".join(_field(1, value(x)) for x in v))
    raise TypeError(type(v))


def b64(v) -> str:
    return base64.b64encode(value(v)).decode()
