"""Matching a presented key to a configured one, and what the key may see. Pure.

Keys are compared as SHA-256 digests with ``hmac.compare_digest``, against every configured key
(no early exit): neither the time taken nor a length tells how close a guess came.
"""

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from app.config import ApiKeyConfig, KeyRole


@dataclass(frozen=True)
class Principal:
    """The caller: a configured key's name and role, and its tenants (None: all)."""

    name: str | None  # None when no keys are configured: auth is off
    role: KeyRole
    users: frozenset[str] | None = None
    task_sources: frozenset[str] | None = None

    @property
    def scoped(self) -> bool:
        return self.users is not None or self.task_sources is not None

    def allows(self, user: str | None, task_source: str | None) -> bool:
        """Whether a task of this user and task_source is this key's to see."""
        if self.users is not None and user not in self.users:
            return False
        return self.task_sources is None or task_source in self.task_sources


OPEN = Principal(name=None, role="admin")  # no keys configured: everyone may do everything


def identify(keys: Mapping[str, ApiKeyConfig], presented: str) -> Principal | None:
    """The principal of the configured key equal to ``presented``, if any."""
    digest = _digest(presented)
    found: Principal | None = None
    for name, config in keys.items():
        if hmac.compare_digest(digest, _digest(config.key.get_secret_value())) and not found:
            found = Principal(
                name=name,
                role=config.role,
                users=_set(config.users),
                task_sources=_set(config.task_sources),
            )
    return found


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _set(values: tuple[str, ...] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)
