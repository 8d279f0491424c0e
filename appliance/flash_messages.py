"""The console's flash messages ("Limits of k saved."): Django's fallback storage, a signed ``messages``
cookie (the session when they do not fit), with the cookie deleted under the attributes it was set with.

Django 6.0's CookieStorage sets the cookie HttpOnly (SESSION_COOKIE_HTTPONLY) and SameSite, but deletes it
through HttpResponse.delete_cookie, which takes no ``httponly`` (django/contrib/messages/storage/cookie.py,
``CookieStorage._update_cookie``), so each deletion went out without HttpOnly. Secure follows
SESSION_COOKIE_SECURE on both, as Django sets it.
"""

from typing import Literal, cast

from django.conf import settings
from django.contrib.messages.storage.cookie import CookieStorage
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.messages.storage.session import SessionStorage
from django.http import HttpResponseBase

EPOCH = "Thu, 01 Jan 1970 00:00:00 GMT"  # what Django's delete_cookie sends as the expiry
SameSite = Literal["Lax", "Strict", "None", False] | None  # what set_cookie takes; the setting is typed str


class FlashCookieStorage(CookieStorage):
    def _update_cookie(self, encoded_data: str | None, response: HttpResponseBase) -> None:
        """Set the cookie to ``encoded_data`` (a browser-session cookie), or delete it when there is none
        (Max-Age 0), with the same domain, Secure, HttpOnly and SameSite either way."""
        max_age, expires = (None, None) if encoded_data else (0, EPOCH)
        response.set_cookie(
            self.cookie_name,
            encoded_data or "",
            max_age=max_age,
            expires=expires,
            domain=settings.SESSION_COOKIE_DOMAIN,
            secure=bool(settings.SESSION_COOKIE_SECURE),
            httponly=bool(settings.SESSION_COOKIE_HTTPONLY),
            samesite=cast(SameSite, settings.SESSION_COOKIE_SAMESITE),
        )


class FlashStorage(FallbackStorage):
    """MESSAGE_STORAGE: the cookie first, the session for what does not fit in it (as Django's default)."""

    storage_classes = (FlashCookieStorage, SessionStorage)
