"""The proxy's sessions, their keys, and the capacity they hold.

The settings are `rltap.config`'s own: `SessionStore` takes the `LimitsConfig`, `ProxyState`
the whole `ServeConfig` (its chat section is every session's).

Capacity: the proxy runs at most `capacity` sessions at once. `grant` reserves a slot that expires
after `grant_ttl` unless a session starts on it; a session holds its slot until it ends, is reaped
or its grant expires unused. `start` consumes a grant (or takes a free slot directly).

Lifecycle: a session is active until `end` (or the reaper finds it idle for `session_ttl`); then
it is ended and its key answers 410, but its completed interactions stay exportable for
`export_grace` seconds. A successful export frees the session; so does the grace period running
out.

Keys: session keys are looked up by their BLAKE2b digest, so the lookup's timing says nothing
about the key; the admin key is compared with `hmac.compare_digest`. Keys are never logged.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import LimitsConfig, ServeConfig
from rltap.engines.base import InferenceEngine
from rltap.proxy.metrics import ProxyMetrics
from rltap.record.errors import (
    AuthenticationError,
    CapacityExhausted,
    Conflict,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    RltapError,
    SessionGone,
)
from rltap.record.ids import random_hex
from rltap.record.sampling import EpisodeSampling
from rltap.session.session import Session

if TYPE_CHECKING:
    from rltap.store.capture import CaptureStore

__all__ = [
    "ProxyState",
    "SessionRecord",
    "SessionState",
    "SessionStore",
    "key_digest",
]


def key_digest(key: str) -> bytes:
    # BLAKE2b, not SHA-256: hashlib's SHA-256 goes through OpenSSL, whose per-call setup costs a
    # few microseconds more on every request of a session.
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=32).digest()


class SessionState(enum.StrEnum):
    ACTIVE = "active"
    ENDED = "ended"  # by the agent (end_session)
    REAPED = "reaped"  # idle past the TTL
    INTERRUPTED = "interrupted"  # still active when its proxy died (read back from its store)


@dataclass(slots=True, kw_only=True)
class SessionRecord:
    """A session as the proxy sees it: its episode, key, state and clocks."""

    session: Session
    key_hash: bytes
    task_id: str | None = None
    state: SessionState = SessionState.ACTIVE
    last_active: float = 0.0
    ended_at: float | None = None
    in_flight: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def call_started(self) -> None:
        self.in_flight += 1
        self.idle.clear()

    def call_finished(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    @property
    def session_id(self) -> str:
        return self.session.session_id


class SessionStore:
    """Sessions by id and by key digest, with capacity grants and a reaper."""

    def __init__(
        self,
        admin_key: str,
        new_session: Callable[[str], Session],
        limits: LimitsConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        capture: CaptureStore | None = None,
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        self.capture = capture
        self._on_end = on_end  # told each session id that ends (an engine router forgets it)
        self._admin_hash = key_digest(admin_key)
        self._new_session = new_session
        self.limits = limits or LimitsConfig()
        self._clock = clock
        self._by_id: dict[str, SessionRecord] = {}
        self._by_key: dict[bytes, SessionRecord] = {}
        self._grants: deque[float] = deque()  # expiry times of unused grants, oldest first
        self._holding = 0  # sessions holding a slot (active ones)

    # Keys ---------------------------------------------------------------------------------------
    def is_admin(self, key: str) -> bool:
        return hmac.compare_digest(key_digest(key), self._admin_hash)

    def require_admin(self, key: str | None) -> None:
        if not key:
            msg = "missing API key: send the admin key as 'Authorization: Bearer <key>'"
            raise AuthenticationError(msg)
        if self.is_admin(key):
            return
        if key_digest(key) in self._by_key:
            msg = "this route needs the admin key; a session key was given"
            raise PermissionDenied(msg)
        msg = "invalid API key"
        raise AuthenticationError(msg)

    def session_for_key(self, key: str | None) -> SessionRecord:
        """The active session a session key belongs to."""
        if not key:
            msg = "missing API key: send the session key as 'Authorization: Bearer <key>'"
            raise AuthenticationError(msg)
        digest = key_digest(key)
        record = self._by_key.get(digest)
        if record is None:
            if self.is_admin(key):
                msg = "the admin key is not a session key; start a session for its key"
                raise PermissionDenied(msg)
            stored = None if self.capture is None else self.capture.session_of_key(digest)
            if stored is not None:  # a session of an earlier proxy on this store
                msg = f"session {stored} belonged to an earlier proxy; start a new one"
                raise SessionGone(msg)
            msg = "invalid API key"
            raise AuthenticationError(msg)
        if record.state is not SessionState.ACTIVE:
            msg = f"session {record.session_id} has {record.state.value}; start a new one"
            raise SessionGone(msg)
        self.touch(record)
        return record

    def touch(self, record: SessionRecord) -> None:
        """The session was used just now (the TTL counts from its last use)."""
        record.last_active = self._clock()

    # Capacity -----------------------------------------------------------------------------------
    def _expire_grants(self) -> None:
        now = self._clock()
        while self._grants and self._grants[0] <= now:
            self._grants.popleft()

    def _free_slots(self) -> int:
        self._expire_grants()
        return self.limits.capacity - self._holding - len(self._grants)

    def grant(self) -> float:
        """Reserve a slot; returns its expiry as seconds from now."""
        if self._free_slots() <= 0:
            msg = f"no capacity: {self.limits.capacity} slots are in use or reserved"
            raise CapacityExhausted(msg, retry_after=self._retry_after())
        self._grants.append(self._clock() + self.limits.grant_ttl)
        return self.limits.grant_ttl

    def _retry_after(self) -> float:
        if self._grants:
            return max(1.0, self._grants[0] - self._clock())
        return 1.0

    @property
    def open_sessions(self) -> int:
        return self._holding

    # Lifecycle ----------------------------------------------------------------------------------
    def start(
        self,
        task_id: str | None = None,
        api_key: str | None = None,
        sampling: EpisodeSampling | None = None,
    ) -> tuple[str, str]:
        """A new session on a grant (or a free slot), its calls sampled by `sampling` when
        given; returns (session_id, api_key)."""
        if api_key is not None:
            if not api_key.strip():
                msg = "api_key must not be empty"
                raise InvalidRequest(msg, param="api_key")
            # Keys arrive in a header, read stripped: any other key could never be used.
            if api_key != api_key.strip() or not (api_key.isascii() and api_key.isprintable()):
                msg = "api_key must be printable ASCII, without blanks at either end"
                raise InvalidRequest(msg, param="api_key")
            if self.is_admin(api_key):
                msg = "api_key must not be the admin key"
                raise InvalidRequest(msg, param="api_key")
            existing = self._by_key.get(key_digest(api_key))
            if existing is not None and existing.state is SessionState.ACTIVE:
                msg = "api_key is bound to a live session"
                raise Conflict(msg, param="api_key")
        self._expire_grants()
        if self._grants:
            self._grants.popleft()
        elif self._free_slots() <= 0:
            msg = f"no capacity: {self.limits.capacity} sessions are running; grant capacity first"
            raise CapacityExhausted(msg, retry_after=self._retry_after())
        key = api_key or f"sk-rltap-{secrets.token_urlsafe(24)}"
        session_id = random_hex()
        record = SessionRecord(
            session=self._new_session(session_id),
            key_hash=key_digest(key),
            task_id=task_id,
            last_active=self._clock(),
        )
        if sampling is not None:
            record.session.sampling = sampling
        old = self._by_key.get(record.key_hash)
        if old is not None:  # an ended session awaiting export: keep it reachable by id only
            old.key_hash = b""
        self._by_id[session_id] = record
        self._by_key[record.key_hash] = record
        self._holding += 1
        if self.capture is not None:
            self.capture.session_started(session_id, record.key_hash, task_id)
        return session_id, key

    def get(self, session_id: str) -> SessionRecord:
        record = self._by_id.get(session_id)
        if record is None:
            msg = f"no session {session_id!r} (never started, or already exported)"
            raise NotFound(msg, param="session_id")
        return record

    def end(self, record: SessionRecord, state: SessionState = SessionState.ENDED) -> None:
        if record.state is not SessionState.ACTIVE:
            return
        record.state = state
        record.ended_at = self._clock()
        record.ended.set()
        self._holding -= 1
        if self._on_end is not None:
            self._on_end(record.session_id)
        if self.capture is not None:
            self.capture.session_ended(record.session_id, state.value)

    def free(self, record: SessionRecord) -> None:
        """Forget a session (after its export, or when its grace period ran out)."""
        self.end(record)
        self._by_id.pop(record.session_id, None)
        if self._by_key.get(record.key_hash) is record:
            del self._by_key[record.key_hash]

    def reap(self) -> int:
        """End idle sessions and free those whose export grace ran out; returns how many changed."""
        now = self._clock()
        changed = 0
        for record in list(self._by_id.values()):
            if record.state is SessionState.ACTIVE:
                if record.in_flight == 0 and now - record.last_active > self.limits.session_ttl:
                    self.end(record, SessionState.REAPED)
                    changed += 1
            elif record.ended_at is not None and now - record.ended_at > self.limits.export_grace:
                self.free(record)
                changed += 1
        self._expire_grants()
        return changed

    async def run_reaper(self) -> None:
        """Reap forever, every `reap_interval` seconds (the app runs this as a background task)."""
        while True:
            await asyncio.sleep(self.limits.reap_interval)
            self.reap()


@dataclass(slots=True, kw_only=True)
class ProxyState:
    """What the routes share: the settings, engine, renderer, sessions and metrics."""

    config: ServeConfig
    engine: InferenceEngine
    renderer: ChatRenderer
    store: SessionStore
    metrics: ProxyMetrics
    # Why the engine did not start (a dead --url address): for whoever runs the app to report,
    # as the server framework only logs it.
    startup_error: RltapError | None = None
