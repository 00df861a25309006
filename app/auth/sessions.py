"""The ops page's session cookie: proof that its holder logged in with an admin key, which the
cookie itself never holds. Pure.

A session is ``<key name>.<expiry, unix seconds>.<signature>``, the signature an HMAC-SHA256 of
the name and expiry under the key's own secret. So every worker and host of the service checks
it without shared state or a secret of its own, a restart keeps sessions, and removing or
changing a key ends the sessions it opened. The cookie is HttpOnly: scripts cannot read it.
"""

import base64
import hashlib
import hmac
from collections.abc import Mapping

from app.auth.keys import Principal, identify
from app.config import ApiKeyConfig

COOKIE = "context_ui_session"
COOKIE_PATH = "/ui"
SESSION_S = 12 * 3600  # a working day; then the form asks for the key again


def login(keys: Mapping[str, ApiKeyConfig], presented: str) -> Principal | None:
    """The principal of ``presented`` if it is an admin key for every tenant (the pages show
    them all), else None."""
    principal = identify(keys, presented)
    if principal is None or principal.role != "admin" or principal.scoped:
        return None
    return principal


def issue(keys: Mapping[str, ApiKeyConfig], name: str, now: float) -> str:
    """A session for the key called ``name``, valid SESSION_S from ``now``."""
    expiry = int(now) + SESSION_S
    return f"{name}.{expiry}.{_signature(keys[name], name, expiry)}"


def verify(keys: Mapping[str, ApiKeyConfig], session: str, now: float) -> Principal | None:
    """The principal a session was issued to, if it is well signed, unexpired, and its key is
    still an admin key for every tenant."""
    parts = session.rsplit(".", 2)
    # A time in seconds, in ASCII digits: a longer run than any such time is refused before
    # int() (which gives up past 4,300 digits, a 500 for a forged cookie).
    if len(parts) != 3 or not (parts[1].isascii() and parts[1].isdigit()) or len(parts[1]) > 20:
        return None
    name, expiry_text, signature = parts
    config = keys.get(name)
    expiry = int(expiry_text)
    if config is None or expiry <= now:
        return None
    if not hmac.compare_digest(signature, _signature(config, name, expiry)):
        return None
    if config.role != "admin" or config.users is not None or config.task_sources is not None:
        return None
    return Principal(name=name, role="admin")


def _signature(config: ApiKeyConfig, name: str, expiry: int) -> str:
    secret = config.key.get_secret_value().encode()
    digest = hmac.new(secret, f"ui-session|{name}|{expiry}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
