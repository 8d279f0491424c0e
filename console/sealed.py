"""Secrets the appliance must read back (an engine's per-launch key) stored sealed, so a database dump
or backup does not hold them: ``SealedCharField`` encrypts on the way in and decrypts on the way out.

Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) under a key derived from SECRET_KEY as
SHA-256("hearth sealed field:" + SECRET_KEY); the keys of SECRET_KEY_FALLBACKS still open what they
sealed, so SECRET_KEY can be rotated the way Django rotates it. A value sealed under a key no longer
configured reads as "" (logged): the engine it belonged to is then refused until it is launched again.
"""

import base64
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models

log = logging.getLogger(__name__)
MARK = "fernet:"  # a sealed value's beginning; a value without it is plaintext from before sealing


def _fernet(secret_keys: Sequence[str] = ()) -> MultiFernet:
    keys = secret_keys or [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    digests = (hashlib.sha256(f"hearth sealed field:{k}".encode()).digest() for k in keys)
    return MultiFernet([Fernet(base64.urlsafe_b64encode(d)) for d in digests])


def seal(value: str) -> str:
    """``value`` encrypted, as text that starts with MARK (about 1.4 × its length + 110 characters)."""
    return MARK + _fernet().encrypt(value.encode()).decode()


def unseal(value: str) -> str:
    """The plaintext of a sealed value; a value without MARK is returned as it is; "" when no configured
    key opens it."""
    if not value.startswith(MARK):
        return value
    try:
        return _fernet().decrypt(value.removeprefix(MARK).encode()).decode()
    except InvalidToken:
        log.warning("a sealed value no configured SECRET_KEY opens was read as empty (was SECRET_KEY changed?)")
        return ""


def unseal_under(value: str, secret_keys: Sequence[str]) -> str:
    """The plaintext of a value sealed under one of ``secret_keys`` (another appliance's SECRET_KEY, as a backup
    holds it); a value without MARK is returned as it is. Raises cryptography's InvalidToken when none opens it."""
    if not value.startswith(MARK):
        return value
    return _fernet(secret_keys).decrypt(value.removeprefix(MARK).encode()).decode()


class SealedCharField(models.CharField):  # type: ignore[type-arg]
    """A CharField stored sealed. Lookups by value do not work (each seal is different); read, write, compare
    in Python. ``max_length`` bounds the stored, sealed text (255 holds a secret of up to ~100 characters)."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        return None if value is None else unseal(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if value is None or value == "" or str(value).startswith(MARK):
            return value
        return seal(str(value))
