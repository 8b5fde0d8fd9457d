"""HTTP basic auth against bcrypt hashes, cheap enough to run on every scrape.

bcrypt is slow on purpose (at cost 10 a check takes far more CPU than a scrape), and
Prometheus sends the same credentials every scrape interval, so a successful check is
remembered. The memory key is an HMAC of user, stored hash and password under a key
that lives only in this process: the cache holds no password, and a hash changed in the
web-config stops matching old entries by itself. Failures are never remembered, so
guessing pays the full bcrypt price every time; guesses are checked one at a time, so a
flood of them costs one core, not all.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading

from tritonwatch.config.web_config import BasicAuthUser

BCRYPT_MAX_PASSWORD_BYTES = 72
"""bcrypt reads no further; htpasswd and Go truncate, bcrypt 5 raises, so we truncate."""
CACHE_ENTRIES = 256


def parse_basic_authorization(header: str | None) -> tuple[bytes, bytes] | None:
    """``Basic base64(user:password)`` → ``(user, password)``; None when absent or garbled."""
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, separator, password = decoded.partition(b":")
    if not separator:
        return None
    return user, password


class BasicAuthChecker:
    """Checks credentials against the configured users, in time that does not reveal
    whether a user name exists."""

    def __init__(self, users: tuple[BasicAuthUser, ...]) -> None:
        if not users:
            raise ValueError("basic auth needs at least one user")
        self._users = tuple((hashlib.sha256(u.name.encode()).digest(), u) for u in users)
        # An unknown user is checked against a real hash too, so the answer takes as
        # long as for a known one; the result is then thrown away.
        self._decoy_hash = users[0].password_hash
        self._cache_key = secrets.token_bytes(32)
        self._verified: dict[bytes, None] = {}  # insertion order = eviction order
        self._cache_lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()

    def check(self, username: bytes, password: bytes) -> bool:
        """True when ``username`` is configured and ``password`` matches its hash."""
        user = self._find(username)
        stored = user.password_hash if user is not None else self._decoy_hash
        key = self._memory_key(username, stored, password)
        with self._cache_lock:
            if user is not None and key in self._verified:
                return True
        # Imported on the first check, not with the module: a daemon without basic auth
        # never loads bcrypt's extension (~0.5 MiB of RSS, benchmarks/footprint.py).
        import bcrypt  # noqa: PLC0415 - on use only

        with self._bcrypt_lock:
            matches = bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], stored)
        if not matches or user is None:
            return False
        self._remember(key)
        return True

    def _find(self, username: bytes) -> BasicAuthUser | None:
        """Compares against every user, digests of equal length, without stopping early."""
        wanted = hashlib.sha256(username).digest()
        found = None
        for digest, user in self._users:
            if hmac.compare_digest(digest, wanted):
                found = user
        return found

    def _memory_key(self, *parts: bytes) -> bytes:
        framed = b"".join(len(part).to_bytes(4, "big") + part for part in parts)
        return hmac.digest(self._cache_key, framed, "sha256")

    def _remember(self, key: bytes) -> None:
        with self._cache_lock:
            if len(self._verified) >= CACHE_ENTRIES:
                del self._verified[next(iter(self._verified))]
            self._verified[key] = None
