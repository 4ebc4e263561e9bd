"""RS256 JWTs signed at test time with a throwaway key (`cryptography`), and the JWKS that
Envoy's `jwt_authn` filter verifies them with."""

from __future__ import annotations

import base64
import json
import time
import uuid

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ISSUER = "https://issuer.switchboard.test"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


class Signer:
    def __init__(self, kid: str = "test-key") -> None:
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> str:
        n = self.key.public_key().public_numbers()
        return json.dumps({"keys": [{"kty": "RSA", "alg": "RS256", "use": "sig", "kid": self.kid,
                                     "n": b64url(uint(n.n)), "e": b64url(uint(n.e))}]})

    def token(self, sub: str, **claims) -> str:
        """A fresh token for `sub` (a new `jti` each time, so two tokens never share bytes)."""
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        payload = {"iss": ISSUER, "sub": sub, "iat": int(time.time()), "exp": int(time.time()) + 600,
                   "jti": str(uuid.uuid4()), **claims}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64url(signature)}"


def jwt_authn_filter(jwks: str, payload_in_metadata: str = "jwt_payload") -> dict:
    """Envoy's jwt_authn HTTP filter: every request needs a token this JWKS verifies; the
    verified payload goes to dynamic metadata under `payload_in_metadata`."""
    return {
        "name": "envoy.filters.http.jwt_authn",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
            "providers": {"test": {
                "issuer": ISSUER,
                "local_jwks": {"inline_string": jwks},
                "payload_in_metadata": payload_in_metadata,
                "forward": False,
            }},
            "rules": [{"match": {"prefix": "/"}, "requires": {"provider_name": "test"}}],
        },
    }
