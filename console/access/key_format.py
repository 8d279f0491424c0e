"""API key format and hashing.

A key reads ``hk-XXXXXXXX.SECRET``: ``hk-XXXXXXXX`` (11 chars) is the public prefix kept in clear for
lookup and display; the whole key is stored only as its SHA-256 (keys are 256-bit random, so a fast
hash is enough; a slow password hash would only tax every request). Comparison is constant-time.
"""

import hashlib
import hmac
import secrets
import string

PREFIX_LEN = 11
_ALPHABET = string.ascii_letters + string.digits


def new_key() -> tuple[str, str, str]:
    """A fresh key: (key, prefix, sha256 hex). Show the key once; store the prefix and the hash."""
    prefix = "hk-" + "".join(secrets.choice(_ALPHABET) for _ in range(PREFIX_LEN - 3))
    key = f"{prefix}.{secrets.token_urlsafe(32)}"
    return key, prefix, hash_key(key)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_prefix(key: str) -> str:
    return key[:PREFIX_LEN]


def matches(key: str, stored_hash: str) -> bool:
    """Constant-time check of ``key`` against a stored SHA-256 hex digest."""
    return hmac.compare_digest(hash_key(key), stored_hash)
