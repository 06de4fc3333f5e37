"""An event loop on a thread of its own, for a caller that is synchronous.

TRL calls `rollout_func` synchronously, while the proxy, its engine and the agents are asyncio:
they live on this loop between calls (the proxy keeps serving, the engine keeps its state), and
each call runs one coroutine there and waits for it. The thread is a daemon only so that a
forgotten `close()` cannot hang the interpreter's exit; `close()` (and, for a loop not closed,
the interpreter's exit) stops and joins it.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["BackgroundLoop"]

T = TypeVar("T")


class BackgroundLoop:
    """An asyncio loop running on a thread it starts at the first `run`.

    Usage:
        loop = BackgroundLoop("rltap-trl")
        result = loop.run(coroutine())  # blocks this thread until it is done
        loop.close()
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the loop; its result, or its exception raised here."""
        loop = self._started()
        if threading.current_thread() is self._thread:
            coroutine.close()
            msg = f"{self.name}: run() called from its own loop would wait for itself"
            raise RuntimeError(msg)
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name=self.name, daemon=True
                )
                self._thread.start()
                atexit.register(self.close)
            return self._loop

    def close(self) -> None:
        """Cancel what is left on the loop, stop it and join its thread. Idempotent."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        atexit.unregister(self.close)
        asyncio.run_coroutine_threadsafe(_cancel_rest(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


async def _cancel_rest() -> None:
    current = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not current]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
