"""Who may see the inspector: the admin token, as a bearer header or as a signed session cookie.

Problem: the inspector shows every tenant's prompts and tool output, so it must be as closed as
the admin API, yet usable from a browser, which cannot attach a bearer header to a link.

Rules:
- Off (404 on every /ui path) while no admin token is configured, like /admin.
- `Authorization: Bearer <admin token>` opens every page and JSON read (scripts, tests).
- A browser posts the token once to the login form and gets a session cookie
  `expiry.nonce.signature`, signed with HMAC-SHA256 under a key derived from the admin token
  (rotating the token ends every session), HttpOnly, SameSite=Strict, Path=/ui, Secure when the
  request came over HTTPS (the scheme, or `X-Forwarded-Proto: https` from a terminating proxy).
  The token never appears in a URL: the login is a POST and nothing redirects with it.
- A state-changing request (logout, delete) made with the cookie must carry the session's CSRF
  proof (HMAC of the nonce, a hidden form field) and no foreign `Origin`; SameSite=Strict already
  keeps other sites' requests cookieless, the proof also covers same-site attackers. A bearer
  request needs no proof: browsers never attach bearer headers on their own.

Example: `ctxproxy_ui=1767225600.3f2a...9c.8d1e...` is valid until 1767225600 (epoch seconds).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

from ..asgi import bearer_token
from ..config import Config
from ..errors import BadRequest, Forbidden, NotFound, PayloadTooLarge, Unauthorized

COOKIE = "ctxproxy_ui"
SESSION_SECONDS = 12 * 3600
FORM_MAX_BYTES = 16 * 1024

SECURITY_HEADERS = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "same-origin"),  # "no-referrer" would make browsers send `Origin: null` on POSTs
    ("cache-control", "no-store"),
]
"""On every /ui answer: nothing but the proxy's own files may load, nothing may frame the pages."""


@dataclass(frozen=True)
class Credentials:
    """How the request proved itself: by `bearer` header, or by the session `nonce` of its cookie."""

    bearer: bool
    nonce: str | None = None


def admin_token(request: Request) -> str:
    """The configured admin token; every /ui path is a 404 without one."""
    services = request.app.state.ctx
    token: str | None = services.keys.admin_token
    if not token:
        raise NotFound(f"Unknown path {request.url.path}: the inspector is off. " + off_hint(services.config))
    return token


def off_hint(config: Config) -> str:
    """How to turn the admin API and the inspector on, for the config as it is."""
    if config.admin_token_env:
        return (
            f"The config names admin_token_env: {config.admin_token_env}, which is not set in the proxy's "
            f"environment: start it with {config.admin_token_env}=<a long random token> exported."
        )
    return (
        "Add admin_token_env: CTXPROXY_ADMIN_TOKEN to the config and start the proxy with "
        "CTXPROXY_ADMIN_TOKEN=<a long random token> exported."
    )


def _key(token: str) -> bytes:
    return hmac.new(token.encode(), b"ctxproxy-ui-session-v1", hashlib.sha256).digest()


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def new_session(token: str, now: float | None = None) -> str:
    """A fresh cookie value, valid for SESSION_SECONDS."""
    expiry = int((now if now is not None else time.time()) + SESSION_SECONDS)
    body = f"{expiry}.{secrets.token_hex(16)}"
    return f"{body}.{_sign(_key(token), body)}"


def session_nonce(token: str, value: str | None, now: float | None = None) -> str | None:
    """The nonce of a valid, unexpired cookie value, else None."""
    if not value or value.count(".") != 2:
        return None
    expiry, nonce, signature = value.split(".")
    if not hmac.compare_digest(signature.encode(), _sign(_key(token), f"{expiry}.{nonce}").encode()):
        return None
    if not expiry.isdigit() or int(expiry) < (now if now is not None else time.time()):
        return None
    return nonce


def csrf_token(token: str, nonce: str) -> str:
    return _sign(_key(token), f"csrf.{nonce}")


def credentials(request: Request) -> Credentials | None:
    """The request's valid credentials, or None (the token is configured: `admin_token` checked)."""
    token = admin_token(request)
    given = bearer_token(request.headers)
    if given is not None:
        if hmac.compare_digest(given.encode(), token.encode()):
            return Credentials(bearer=True)
        raise Unauthorized("The inspector needs 'Authorization: Bearer <admin token>' or a login.")
    nonce = session_nonce(token, request.cookies.get(COOKIE))
    return Credentials(bearer=False, nonce=nonce) if nonce else None


def require(request: Request) -> Credentials:
    found = credentials(request)
    if found is None:
        raise Unauthorized("Log in at /ui/login or send 'Authorization: Bearer <admin token>'.")
    return found


def same_origin(request: Request) -> bool:
    """No `Sec-Fetch-Site`/`Origin` header naming another site (browsers send them on every POST;
    `Sec-Fetch-Site` decides when present, an opaque `Origin: null` never passes)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form body (small: a token and a CSRF field)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > FORM_MAX_BYTES:
        raise PayloadTooLarge(f"A form body is at most {FORM_MAX_BYTES} bytes.")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > FORM_MAX_BYTES:
            raise PayloadTooLarge(f"A form body is at most {FORM_MAX_BYTES} bytes.")
    try:
        fields = parse_qs(raw.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise BadRequest("The form body is not UTF-8.") from None
    return {name: values[-1] for name, values in fields.items()}


async def require_change(request: Request) -> tuple[Credentials, dict[str, str]]:
    """Credentials for a state-changing POST, with its CSRF proof checked; the form it carried."""
    found = require(request)
    form = await read_form(request)
    if found.bearer:
        return found, form
    token = admin_token(request)
    assert found.nonce is not None
    proof = form.get("csrf", "")
    if not same_origin(request) or not hmac.compare_digest(proof.encode(), csrf_token(token, found.nonce).encode()):
        raise Forbidden("This action needs the form's CSRF token from the same origin; reload the page and retry.")
    return found, form


def is_https(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def cookie_header(request: Request, value: str, max_age: int) -> tuple[str, str]:
    secure = "; Secure" if is_https(request) else ""
    return ("set-cookie", f"{COOKIE}={value}; Max-Age={max_age}; Path=/ui; HttpOnly; SameSite=Strict{secure}")
