"""Engine servers rltap starts, watches and stops (`--launch`): `ManagedServers`, and the two
ways a run holds them, `launched_engines` (async: `rltap rollout`, `eval`, `train`) and
`ManagedServers.running` (blocking: `rltap serve`).

Each server (`rltap.engines.launch.ServerSpec`) runs in a process group of its own, its output
appended to its log file. rltap waits until every server answers `GET /health` with 200,
printing which are up and the seconds waited; a server that exits first, or is not up within
--launch-timeout, ends the start with `EngineServerFailed` quoting its log's last lines, the
others stopped. While the run goes on a thread watches the processes: a server that exits ends
the run the same way, or with --restart-engines is started again on its port and waited for.

Stopping sends SIGTERM to each server's group (vLLM's API server and its engine-core process),
then SIGKILL to what is left after a grace. It happens when the run ends, on an error, on
Ctrl-C, on SIGTERM to rltap (turned into `rltap.record.errors.Terminated` while servers run,
so the same cleanup runs) and at interpreter exit; a server started from the main thread also
gets SIGTERM from Linux when rltap dies without cleaning up (SIGKILL): the parent-death signal,
set between fork and exec. It reaches the server's own process only; vLLM's engine core ends
when its API server does.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import IO

from rich.console import Console

from rltap.config.serve import ServeConfig
from rltap.engines._process import ManagedServer
from rltap.engines.launch import ServerSpec, server_specs
from rltap.record.errors import EngineServerFailed, Terminated

__all__ = ["ManagedServer", "ManagedServers", "launched_engines", "log_folder"]

STOP_GRACE_SECONDS = 20.0
_POLL_SECONDS = 0.5
# How long an error that may come from a dying server waits for its process to end.
_DYING_SECONDS = 2.0


class ManagedServers:
    """The servers of one run: started together, watched, stopped together.

    Usage:
        servers = ManagedServers.of(config, log_dir=Path("out/engines"))
        with servers.running():
            engine = create_engine(servers.serve_config(config).engine)
    """

    def __init__(
        self,
        specs: Sequence[ServerSpec],
        *,
        timeout: float,
        restart: bool = False,
        out: IO[str] | None = None,
    ) -> None:
        self.servers = [ManagedServer(spec) for spec in specs]
        self.timeout = timeout
        self.restart = restart
        self.failure: EngineServerFailed | None = None
        self._console = Console(
            file=out if out is not None else sys.stderr,
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._previous_sigterm: Callable[[int, FrameType | None], object] | int | None = None

    @classmethod
    def of(
        cls, config: ServeConfig, *, log_dir: Path, lora_rank: int = 0, max_loras: int = 1
    ) -> ManagedServers:
        """The servers `config.launch` asks for (`rltap.engines.launch.server_specs`)."""
        specs = server_specs(config, log_dir=log_dir, lora_rank=lora_rank, max_loras=max_loras)
        return cls(
            specs, timeout=config.launch.launch_timeout, restart=config.launch.restart_engines
        )

    @property
    def urls(self) -> list[str]:
        return [server.spec.url for server in self.servers]

    def serve_config(self, config: ServeConfig) -> ServeConfig:
        """`config` on these servers: their addresses as --url (comma-joined), no --launch, and
        the model folder as the tokenizer, the engine asking the servers for the name they
        serve it under (`--served-model-name` in --launch-args holds)."""
        engine = replace(
            config.engine,
            url=",".join(self.urls),
            model=None,
            tokenizer=config.engine.tokenizer or config.engine.model,
        )
        return replace(config, engine=engine, launch=replace(config.launch, launch=False))

    def start(self) -> None:
        """Start every server (not waiting for them); stops them on SIGTERM and at exit."""
        self._catch_sigterm()
        atexit.register(self.stop)
        where = self.servers[0].spec.log.parent if self.servers else ""
        self._console.print(
            f"rltap: starting {len(self.servers)} engine server(s), logs in {where}"
        )
        for server in self.servers:
            server.start()

    def wait_healthy(self, servers: Sequence[ManagedServer] | None = None) -> None:
        """Wait until `servers` (default: all) answer /health, printing progress; a server that
        exits first or is not up within the timeout raises `EngineServerFailed`."""
        waiting = list(self.servers if servers is None else servers)
        started = time.monotonic()
        up: set[str] = set()
        with self._progress() as show:
            while len(up) < len(waiting):
                if self._stopping.is_set():
                    raise self._stopped_while_starting()
                for server in waiting:
                    if server.spec.name in up:
                        continue
                    code = server.returncode()
                    if code is not None:
                        raise server.failure(f"exited with status {code} before it was healthy")
                    if server.healthy():
                        up.add(server.spec.name)
                waited = time.monotonic() - started
                show(self._status(waiting, up, waited))
                if len(up) < len(waiting) and waited > self.timeout:
                    late = next(s for s in waiting if s.spec.name not in up)
                    what = f"did not answer /health within {self.timeout:g} s (--launch-timeout)"
                    raise late.failure(what)
                if len(up) < len(waiting):
                    time.sleep(_POLL_SECONDS)
        urls = ", ".join(server.spec.url for server in waiting)
        self._console.print(
            f"rltap: engine servers up in {time.monotonic() - started:.0f} s: {urls}"
        )

    def dead(self, wait: float = 0.0) -> EngineServerFailed | None:
        """`failure`, or the failure of a server that has exited (within `wait` seconds: one
        dying refuses connections a moment before its process ends) and the watcher has not
        yet seen; an error elsewhere may be its consequence, this says the cause."""
        deadline = time.monotonic() + wait
        while self.failure is None:
            for server in self.servers:
                code = server.returncode()
                if code is not None:
                    return server.failure(f"exited with status {code} during the run")
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        return self.failure

    def watch(self, on_failure: Callable[[EngineServerFailed], object]) -> None:
        """Watch the servers on a thread from now on: one that exits is restarted
        (--restart-engines), or `failure` is set and `on_failure(failure)` called there."""
        self._watcher = threading.Thread(
            target=self._watch, args=(on_failure,), name="rltap-engine-watch", daemon=True
        )
        self._watcher.start()

    def stop(self) -> None:
        """Stop every server: SIGTERM to each group, SIGKILL to what is left after a grace.
        Idempotent."""
        self._stopping.set()
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join()
        for server in self.servers:
            server.terminate()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for server in self.servers:
            if not server.wait_stopped(deadline):
                server.kill()
        atexit.unregister(self.stop)
        self._restore_sigterm()

    @contextlib.contextmanager
    def running(self) -> Iterator[ManagedServers]:
        """Start the servers and wait for them; stop them when the block ends."""
        try:
            self.start()
            self.wait_healthy()
            yield self
        finally:
            self.stop()

    def _watch(self, on_failure: Callable[[EngineServerFailed], object]) -> None:
        while not self._stopping.wait(_POLL_SECONDS):
            for server in self.servers:
                code = server.returncode()
                if code is None or self._stopping.is_set():
                    continue
                what = f"exited with status {code} during the run"
                if self.restart:
                    try:
                        self._restart(server, what)
                        continue
                    except EngineServerFailed as exc:
                        if self._stopping.is_set():
                            return
                        self.failure = exc
                else:
                    self.failure = server.failure(what)
                on_failure(self.failure)
                return

    def _restart(self, server: ManagedServer, what: str) -> None:
        self._console.print(
            f"rltap: engine server {server.spec.name} {what}: restarting it "
            f"(--restart-engines), log {server.spec.log}"
        )
        server.kill()  # what is left of its group (an engine core)
        server.start()
        self.wait_healthy([server])

    def _status(self, waiting: Sequence[ManagedServer], up: set[str], waited: float) -> str:
        states = ", ".join(
            f"{s.spec.name} {'up' if s.spec.name in up else 'starting'}" for s in waiting
        )
        return f"rltap: waiting for engine servers: {states} ({waited:.0f} s of {self.timeout:g})"

    @contextlib.contextmanager
    def _progress(self) -> Iterator[Callable[[str], None]]:
        """A status line: updated in place on a terminal; else printed when it changes (the
        seconds aside) and every 30 s."""
        if self._console.is_terminal:
            with self._console.status("rltap: starting engine servers") as status:
                yield lambda text: status.update(text)
            return
        last: list[str | float] = ["", 0.0]

        def show(text: str) -> None:
            key = text.rsplit(" (", 1)[0]
            if key != last[0] or time.monotonic() - float(last[1]) >= 30:
                self._console.print(text)
                last[:] = [key, time.monotonic()]

        yield show

    def _stopped_while_starting(self) -> EngineServerFailed:
        return EngineServerFailed("rltap stopped while its engine servers were starting")

    def _catch_sigterm(self) -> None:
        """While servers run, SIGTERM to rltap raises `Terminated` (cleanup runs, the servers
        stop) instead of ending the process on the spot."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)

    def _restore_sigterm(self) -> None:
        previous, self._previous_sigterm = self._previous_sigterm, None
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def log_folder(config: ServeConfig, run_dir: str | os.PathLike[str] | None) -> Path:
    """Where the launched servers' logs go: --launch-logs, else `run_dir`/engines, else a new
    temporary folder."""
    if config.launch.launch_logs:
        return Path(config.launch.launch_logs)
    if run_dir is not None:
        return Path(run_dir) / "engines"
    return Path(tempfile.mkdtemp(prefix="rltap-engines-"))


@contextlib.asynccontextmanager
async def launched_engines(
    config: ServeConfig,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    lora_rank: int = 0,
    max_loras: int = 1,
) -> AsyncIterator[ServeConfig]:
    """`config` itself, or with --launch, `config` on the servers it starts (their URLs as
    --url; `max_loras` LoRA adapters up to `lora_rank` served) until the block ends. A server
    that dies meanwhile cancels the task in the block, which then raises `EngineServerFailed`
    (unless --restart-engines restarts it)."""
    if not config.launch.launch:
        yield config
        return
    log_dir = log_folder(config, run_dir)
    servers = ManagedServers.of(config, log_dir=log_dir, lora_rank=lora_rank, max_loras=max_loras)
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    inside = threading.Event()

    def cancel_run() -> None:
        if inside.is_set():
            task.cancel()

    try:
        servers.start()  # on this thread: the parent-death signal follows the main thread
        await asyncio.to_thread(servers.wait_healthy)
        servers.watch(lambda _failure: loop.call_soon_threadsafe(cancel_run))
        inside.set()
        try:
            yield servers.serve_config(config)
        except asyncio.CancelledError:
            if servers.failure is None:
                raise
            task.uncancel()
            raise servers.failure from None
        except Exception as exc:  # e.g. the engine's start on a server that just died
            failure = servers.dead(wait=_DYING_SECONDS)
            if failure is None:
                raise
            raise failure from exc
        finally:
            inside.clear()
    finally:
        servers.stop()


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)
