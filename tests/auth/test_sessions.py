"""The ops page's session: signed with the key it was issued for, never holding it."""

import pytest

from app.auth import sessions
from app.config import ApiKeyConfig

pytestmark = pytest.mark.database_agnostic

ADMIN = "admin-3Nf6bT1yH8cJ5zD0"
KEYS = {
    "admin-1": ApiKeyConfig.model_validate({"key": ADMIN, "role": "admin"}),
    "agent": ApiKeyConfig.model_validate({"key": "agent-7Qm2vX9pL4sK8wR1"}),
    "alice-admin": ApiKeyConfig.model_validate(
        {"key": "algl-1Zp7gV4kM9wS2aX5", "role": "admin", "users": ["alice"]}
    ),
}


def test_a_session_names_its_key_without_holding_it() -> None:
    session = sessions.issue(KEYS, "admin-1", now=1000)
    assert ADMIN not in session
    principal = sessions.verify(KEYS, session, now=1000 + sessions.SESSION_S - 1)
    assert principal is not None
    assert (principal.name, principal.role, principal.scoped) == ("admin-1", "admin", False)


def test_a_session_ends_with_its_time_or_its_key() -> None:
    session = sessions.issue(KEYS, "admin-1", now=1000)
    assert sessions.verify(KEYS, session, now=1000 + sessions.SESSION_S) is None
    changed = {
        "admin-1": ApiKeyConfig.model_validate({"key": "other-key-4Hs8nC3jF0tL", "role": "admin"})
    }
    assert sessions.verify(changed, session, now=1000) is None
    assert sessions.verify({}, session, now=1000) is None


def test_only_admin_keys_for_every_tenant_log_in() -> None:
    assert sessions.login(KEYS, ADMIN) is not None
    assert sessions.login(KEYS, "agent-7Qm2vX9pL4sK8wR1") is None
    assert sessions.login(KEYS, "algl-1Zp7gV4kM9wS2aX5") is None
    assert sessions.login(KEYS, "") is None
    # A session signed with a key that is no longer an admin key for all is refused.
    demoted = KEYS | {"admin-1": ApiKeyConfig.model_validate({"key": ADMIN, "role": "agent"})}
    assert sessions.verify(demoted, sessions.issue(KEYS, "admin-1", now=0), now=1) is None


def test_malformed_sessions_are_refused() -> None:
    # Past any time's digits (int() gives up past 4,300: a 500 once), and digits int() refuses.
    overlong, superscript = "admin-1." + "9" * 4301 + ".y", "admin-1.\u00b3.y"
    for session in (
        "",
        "admin-1",
        "admin-1.x.y",
        "admin-1..",
        "..",
        "a.b.c.d",
        overlong,
        superscript,
    ):
        assert sessions.verify(KEYS, session, now=0) is None
