"""One engine over several servers of the same kind: what `--url A,B,...` (or `--launch
--launch-replicas N`) puts in the proxy.

`create_engine` builds an `EngineRouter` when `--url` names several addresses: one engine of the
named kind per address (one address keeps the plain engine). The router is an
`InferenceEngine` itself, so the proxy, its sessions and a trainer's weight sync use it as they
use one engine.

Routing. A call's `ModelRequest.session_id` pins its session to one engine, where the session's
prefix stays cached; a session's first call goes to the least loaded healthy engine: fewest
requests in flight, then fewest sessions, then fewest calls ever (so sessions spread evenly when
the engines are idle). The map of sessions is bounded (least recently used first out) and a
session leaves it when the proxy ends it (`end_session`). A call of no session goes to the least
loaded engine too.

Health. At `start` every engine must answer `GET /health`: a dead address is refused with its
address before the proxy serves. Then every `health_interval` seconds each engine is probed; one
that fails (no answer, or not 200) is taken out of rotation, and its sessions go to another
engine on their next call (their prefix is computed again there). A call that fails with a
retryable error (a refused or dropped connection, a 5xx) probes its engine at once: if the probe
fails too, the engine is taken out and the call fails with `EngineUnavailable` (the proxy
answers 503 in the API's own format; a stream ends with that error event) naming the engine and
saying the retry goes elsewhere. An engine that answers `GET /health` again is back in rotation
for new sessions. No engine healthy: every call gets a 503 until one is.

Weight syncs. `update_weights` reaches every engine, at the same version (`version`, default one
more than the highest any engine has, so a version number never names two sets of weights). A
`WeightFolder` is saved once (the first engine whose check passes writes it) and every engine
reloads that folder, all at once; any other source (the tensors a weight transfer streams,
which the router takes when every engine does: `takes_named_tensors`) goes to each engine in
turn. Each engine stamps its tokens with its own version, so in between, and after a sync that
failed on some engine, every token still carries the version of the weights that produced it.
The router's `version` is the lowest of its engines': it moves only once every engine has the
new weights. A sync that fails on an engine raises `EngineError` naming it (and what the others
now serve); the router's version does not move, and the next sync reaches every engine again.

`loads()` is each engine's state for `/metrics` (`rltap.proxy.metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rltap.engines.base import WeightFolder, WeightSource
from rltap.record.errors import EngineError, EngineTimeout, EngineUnavailable, InvalidRequest
from rltap.record.types import ModelRequest, ModelResponse, TokenChunk

if TYPE_CHECKING:
    from rltap.engines._http import HTTPEngineBase
    from rltap.engines._http_client import EngineHTTPClient

__all__ = ["EngineLoad", "EngineRouter"]

logger = logging.getLogger(__name__)

# Sessions remembered at most: past it the least recently used session is forgotten (its next
# call picks an engine again). Sessions also leave when the proxy ends them.
MAX_SESSIONS = 100_000


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One engine of a router as `/metrics` shows it."""

    address: str
    in_flight: int
    sessions: int
    calls: int
    healthy: bool
    version: int


@dataclass(slots=True, eq=False)
class _Member:
    engine: HTTPEngineBase
    in_flight: int = 0
    sessions: int = 0
    calls: int = 0
    healthy: bool = True
    # The health probes' own connection: a probe never waits behind the requests in flight.
    probe: EngineHTTPClient | None = None

    @property
    def address(self) -> str:
        return self.engine.url

    def load(self) -> tuple[int, int, int]:
        return (self.in_flight, self.sessions, self.calls)


class EngineRouter:
    """Several engine servers of one kind as one `InferenceEngine` (module docstring).

    Usage:
        router = EngineRouter([VLLMEngine("http://h1:8000"), VLLMEngine("http://h2:8000")])
        await router.start()  # EngineUnavailable naming any address that does not answer
        response = await router.generate(ModelRequest(input_ids=ids, session_id="s1"))
    """

    takes_state_dict: ClassVar[bool] = False

    def __init__(
        self,
        engines: Sequence[HTTPEngineBase],
        *,
        health_interval: float = 2.0,
        health_timeout: float = 5.0,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        if not engines:
            raise ValueError("an engine router needs at least one engine")
        self._members = [_Member(engine) for engine in engines]
        self.logprob_convention = engines[0].logprob_convention
        self.health_interval = health_interval
        self.health_timeout = health_timeout
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Member] = OrderedDict()
        self._requests: dict[str, _Member] = {}
        self._watcher: asyncio.Task[None] | None = None

    @property
    def engines(self) -> list[HTTPEngineBase]:
        """The engines, in the order of their addresses."""
        return [member.engine for member in self._members]

    @property
    def takes_named_tensors(self) -> bool:
        """Whether every engine's server receives tensors from this process (a weight sync
        then streams them to each engine in turn)."""
        return all(getattr(m.engine, "takes_named_tensors", False) for m in self._members)

    @property
    def version(self) -> int:
        """The version every engine has reached (the lowest of theirs)."""
        return min(member.engine.version for member in self._members)

    def set_version(self, version: int) -> None:
        """Declare every engine's version (weights changed by someone else)."""
        for member in self._members:
            member.engine.set_version(version)

    def loads(self) -> list[EngineLoad]:
        """Each engine's requests in flight, sessions, calls, health and version, now."""
        return [
            EngineLoad(m.address, m.in_flight, m.sessions, m.calls, m.healthy, m.engine.version)
            for m in self._members
        ]

    def engine_of(self, session_id: str) -> str | None:
        """The address of the engine `session_id` is on (None: not routed yet, or forgotten)."""
        member = self._sessions.get(session_id)
        return None if member is None else member.address

    def end_session(self, session_id: str) -> None:
        """Forget `session_id` (the proxy ended it)."""
        member = self._sessions.pop(session_id, None)
        if member is not None:
            member.sessions -= 1

    # Routing ------------------------------------------------------------------------------------
    def _route(self, session_id: str | None) -> _Member:
        if session_id is not None:
            member = self._sessions.get(session_id)
            if member is not None and member.healthy:
                self._sessions.move_to_end(session_id)
                return member
            self.end_session(session_id)  # new, forgotten, or its engine is out: pick again
        member = self._least_loaded()
        if session_id is not None:
            self._sessions[session_id] = member
            member.sessions += 1
            if len(self._sessions) > self._max_sessions:
                _, oldest = self._sessions.popitem(last=False)
                oldest.sessions -= 1
        return member

    def _least_loaded(self) -> _Member:
        best: _Member | None = None
        for member in self._members:
            if member.healthy and (best is None or member.load() < best.load()):
                best = member
        if best is None:
            addresses = ", ".join(member.address for member in self._members)
            msg = f"no engine is healthy ({addresses} all fail GET /health); retry later"
            raise EngineUnavailable(msg)
        return best

    @contextlib.contextmanager
    def _call(self, member: _Member, request_id: str) -> Iterator[None]:
        member.in_flight += 1
        member.calls += 1
        self._requests[request_id] = member
        try:
            yield
        finally:
            member.in_flight -= 1
            if self._requests.get(request_id) is member:
                del self._requests[request_id]

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        """`request` streamed by its session's engine (or the least loaded one)."""
        member = self._route(request.session_id)
        with self._call(member, request.request_id):
            try:
                async with contextlib.aclosing(member.engine.stream(request)) as chunks:
                    async for chunk in chunks:
                        yield chunk
            except EngineError as exc:
                raise await self._failed(member, exc) from exc

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """`request` run to completion by its session's engine (or the least loaded one)."""
        member = self._route(request.session_id)
        with self._call(member, request.request_id):
            try:
                return await member.engine.generate(request)
            except EngineError as exc:
                raise await self._failed(member, exc) from exc

    async def abort(self, request_id: str) -> None:
        member = self._requests.get(request_id)
        if member is not None:
            await member.engine.abort(request_id)

    async def _failed(self, member: _Member, exc: EngineError) -> EngineError:
        """The error a call that failed with `exc` on `member` raises: `exc` itself unless the
        engine fails its health check now, then `EngineUnavailable` saying it is out."""
        if not exc.is_retryable or isinstance(exc, EngineTimeout):
            return exc
        if member.healthy and await self._probe(member):
            return exc
        msg = (
            f"{member.engine.engine_name} at {member.address} failed ({exc.message}) and is out "
            "of rotation until GET /health answers again; retry: the call goes to another engine"
        )
        return EngineUnavailable(msg)

    # Health -------------------------------------------------------------------------------------
    async def _check_health(self, member: _Member) -> None:
        """Return when `member`'s server answers `GET /health` with 200 in time; else raise
        `EngineUnavailable` (`EngineTimeout`: no answer in time) naming its address."""
        from rltap.engines._http_client import EngineHTTPClient  # aiohttp: only when routing

        name, within = member.engine.engine_name, self.health_timeout
        if member.probe is None:
            member.probe = EngineHTTPClient(
                member.address, engine=name, timeout=within, connect_timeout=within
            )
        try:
            async with asyncio.timeout(within):
                reply = await member.probe.request("GET", "/health")
        except TimeoutError:
            msg = f"{name} at {member.address} did not answer GET /health within {within:g}s"
            raise EngineTimeout(msg) from None
        if reply.status != 200:
            text = reply.payload[:200].decode("utf-8", "replace")
            msg = f"{name} at {member.address} answered GET /health with {reply.status} {text}"
            raise EngineUnavailable(msg.rstrip())

    async def _probe(self, member: _Member) -> bool:
        """Check `member`'s health now; take it out of rotation or bring it back."""
        try:
            await self._check_health(member)
        except EngineError as exc:
            if member.healthy:
                logger.warning("engine %s is out of rotation: %s", member.address, exc.message)
            member.healthy = False
            return False
        if not member.healthy:
            logger.warning("engine %s is healthy again, back in rotation", member.address)
        member.healthy = True
        return True

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval)
            await asyncio.gather(*(self._probe(member) for member in self._members))

    async def start(self) -> None:
        """Check that every engine answers (`GET /health`) and start it; then probe them every
        `health_interval` seconds. `EngineUnavailable` naming each address that does not
        answer; `EngineError` when they serve different models. Idempotent."""
        if self._watcher is not None and not self._watcher.done():
            return
        results = await asyncio.gather(
            *(self._start_one(member) for member in self._members), return_exceptions=True
        )
        dead = []
        for member, result in zip(self._members, results, strict=True):
            if isinstance(result, EngineError):
                dead.append(f"{member.address} ({result.message})")
            elif isinstance(result, BaseException):
                raise result
        if dead:
            await self.close()
            msg = (
                f"engine servers not answering at start: {'; '.join(dead)}; every --url "
                "address must answer GET /health before the proxy serves"
            )
            raise EngineUnavailable(msg, is_retryable=False)
        served = {m.address: getattr(m.engine, "model", None) for m in self._members}
        if len(set(served.values())) > 1:
            await self.close()
            listed = ", ".join(f"{address}: {model}" for address, model in served.items())
            msg = f"the engine servers serve different models ({listed}); route over one model"
            raise EngineError(msg)
        self._watcher = asyncio.create_task(self._watch())

    async def _start_one(self, member: _Member) -> None:
        await self._check_health(member)
        await member.engine.start()

    async def close(self) -> None:
        """Stop the health probes and close every engine."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        for member in self._members:
            await member.engine.close()
            if member.probe is not None:
                await member.probe.close()

    # Weights ------------------------------------------------------------------------------------
    async def update_weights(self, source: WeightSource, *, version: int | None = None) -> int:
        """Every engine generates with `source`'s weights, stamped `version` (default: one more
        than the highest engine's); returns the router's version (module docstring)."""
        target = max(m.engine.version for m in self._members) + 1 if version is None else version
        if isinstance(source, WeightFolder):
            shared = _saved_once(source)
            outcomes = await asyncio.gather(
                *(m.engine.update_weights(shared, version=target) for m in self._members),
                return_exceptions=True,
            )
        else:
            outcomes = []
            for member in self._members:
                update = member.engine.update_weights(source, version=target)
                outcomes.append(await _outcome(update))
        self._raise_failures(outcomes, target)
        return self.version

    def _raise_failures(self, outcomes: Sequence[object], target: int) -> None:
        failed: list[tuple[_Member, EngineError | InvalidRequest]] = []
        for member, outcome in zip(self._members, outcomes, strict=True):
            if isinstance(outcome, EngineError | InvalidRequest):
                failed.append((member, outcome))
            elif isinstance(outcome, BaseException):
                raise outcome
        if not failed:
            return
        if len(failed) == len(self._members) and isinstance(failed[0][1], InvalidRequest):
            raise failed[0][1]  # a source no engine takes: the engine's own refusal
        where = "; ".join(f"{m.address}: {exc.message}" for m, exc in failed)
        synced = [m.address for m in self._members if m.engine.version == target]
        msg = (
            f"weight sync to version {target} failed on {len(failed)} of {len(self._members)} "
            f"engines ({where}); {', '.join(synced) or 'no engine'} serve version {target}, the "
            f"router's version stays {self.version}"
        )
        retryable = any(isinstance(e, EngineError) and e.is_retryable for _, e in failed)
        raise EngineError(msg, is_retryable=retryable)


async def _outcome(call: Awaitable[int]) -> int | BaseException:
    try:
        return await call
    except (EngineError, InvalidRequest) as exc:
        return exc


def _saved_once(source: WeightFolder) -> WeightFolder:
    """`source` whose `save` runs once however many engines ask for the folder."""
    save = source.save
    if save is None:
        return source
    saving: asyncio.Future[None] | None = None

    async def save_once(path: Path) -> None:
        nonlocal saving
        if saving is None:
            saving = asyncio.ensure_future(save(path))
        await asyncio.shield(saving)  # one engine's cancelled update does not stop the save

    once: Callable[[Path], Awaitable[None]] = save_once
    return dataclasses.replace(source, save=once)
