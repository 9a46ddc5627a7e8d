"""Cookies of the console: the session, the pre-session login CSRF token, flash messages, and safe redirects.

The session cookie holds a ``TokenKind.SESSION`` bearer token (see services/auth.py); CSRF tokens of signed-in
forms are derived from that session's token id, so no server-side storage is needed. Before sign-in there is
no session to bind to, so the login form uses a signed double-submit cookie instead: the cookie carries a
random nonce, the form carries HMAC(secret, nonce). A cross-site page can neither read the cookie nor compute
the HMAC, and SameSite=Lax keeps the cookie off cross-site POSTs in the first place.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from typing import Literal, TypeVar
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from aicenter.api.deps import SESSION_COOKIE
from aicenter.config import Settings

LOGIN_CSRF_COOKIE = "aicenter_login_csrf"
FLASH_COOKIE = "aicenter_flash"
WORKSPACE_COOKIE = "aicenter_workspace"
CSRF_FIELD = "csrf_token"

FlashLevel = Literal["success", "info", "warning", "error"]
R = TypeVar("R", bound=Response)
_FLASH_MAX_BYTES = 1500  # stay well under the ~4 KiB a browser keeps per cookie


# Console pages load nothing but this server's own files and run no inline script, so a strict policy costs
# nothing and turns an escaping slip into a harmless one. frame-ancestors: no clickjacking of one-click buttons.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)


def add_page_headers(response: R) -> R:
    """Headers every console HTML page carries."""
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


def _sign(secret_key: str, purpose: str, value: str) -> str:
    return hmac.new(secret_key.encode(), f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


def _cookie_kwargs(settings: Settings) -> dict[str, object]:
    return {"httponly": True, "samesite": "lax", "secure": settings.secure_cookies, "path": "/"}


def set_session_cookie(response: Response, settings: Settings, token: str) -> None:
    """Set the console session cookie: HttpOnly, SameSite=Lax, Secure behind https, for the session's lifetime."""
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=settings.session_ttl_s,
        httponly=True,
        samesite="lax",
        secure=settings.secure_cookies,
        path="/",
    )


def clear_session_cookie(response: Response, settings: Settings) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax", secure=settings.secure_cookies)


# --- the pre-session (login form) CSRF token ---------------------------------------------------------------


def login_csrf_pair(request: Request, secret_key: str) -> tuple[str, str]:
    """The (cookie nonce, form token) for the login form, reusing the browser's nonce if it has one.

    Reusing the nonce keeps two open login tabs working; a fresh one is minted when the cookie is missing.
    """
    nonce = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not (16 <= len(nonce) <= 64 and nonce.replace("-", "").replace("_", "").isalnum()):
        nonce = secrets.token_urlsafe(24)
    return nonce, _sign(secret_key, "login-csrf", nonce)


def set_login_csrf_cookie(response: Response, settings: Settings, nonce: str) -> None:
    # One hour is ample to type a password; a stale form re-renders with a fresh token.
    response.set_cookie(
        LOGIN_CSRF_COOKIE, nonce, max_age=3600, httponly=True, samesite="lax", secure=settings.secure_cookies, path="/"
    )


def check_login_csrf(request: Request, secret_key: str, sent: str) -> bool:
    nonce = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not nonce or not sent:
        return False
    return hmac.compare_digest(sent, _sign(secret_key, "login-csrf", nonce))


# --- flash messages --------------------------------------------------------------------------------------------


def set_flash(response: Response, settings: Settings, secret_key: str, level: FlashLevel, message: str) -> None:
    """Queue one message for the next page the browser shows (post/redirect/get).

    Signed so that nothing but this server can put words on a console page.
    """
    message = message[:500]
    payload = base64.urlsafe_b64encode(json.dumps([level, message]).encode()).decode()
    if len(payload) > _FLASH_MAX_BYTES:
        payload = base64.urlsafe_b64encode(json.dumps([level, message[:200]]).encode()).decode()
    value = f"{payload}.{_sign(secret_key, 'flash', payload)[:32]}"
    response.set_cookie(FLASH_COOKIE, value, max_age=120, **_cookie_kwargs(settings))  # type: ignore[arg-type]


def read_flash(request: Request, secret_key: str) -> tuple[str, str] | None:
    """The queued message, if any and if correctly signed."""
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw or "." not in raw:
        return None
    payload, _, signature = raw.rpartition(".")
    if not hmac.compare_digest(signature, _sign(secret_key, "flash", payload)[:32]):
        return None
    try:
        level, message = json.loads(base64.urlsafe_b64decode(payload.encode()))
    except (binascii.Error, ValueError, TypeError):
        return None
    if level not in ("success", "info", "warning", "error") or not isinstance(message, str):
        return None
    return level, message


def clear_flash(response: Response, settings: Settings) -> None:
    response.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="lax", secure=settings.secure_cookies)


# --- redirects -------------------------------------------------------------------------------------------------


def safe_next(value: str | None, default: str = "/") -> str:
    """``value`` if it is a path on this site, else ``default``: no open redirect through ``?next=``.

    Refuses absolute URLs, scheme-relative ``//host`` and ``/\\host`` (which browsers treat as ``//``), and
    control characters (header injection).
    """
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    if any(ord(ch) < 32 or ch == "\\" for ch in value) or len(value) > 2000:
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value
