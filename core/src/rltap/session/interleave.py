"""Several async streams as one, items in the order they arrive (the choices of an n > 1 call)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
from typing import TypeVar

__all__ = ["interleave"]

T = TypeVar("T")


async def interleave(streams: Sequence[AsyncIterable[T]]) -> AsyncGenerator[T, None]:
    """Every item of every stream, as soon as it is produced.

    The first stream to fail ends the whole with its error; closing the result (or an error)
    cancels the streams still running, so no stream outlives its consumer.
    """
    queue: asyncio.Queue[T | BaseException | None] = asyncio.Queue()

    async def pump(stream: AsyncIterable[T]) -> None:
        try:
            async for item in stream:
                queue.put_nowait(item)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            queue.put_nowait(exc)
            raise
        finally:
            queue.put_nowait(None)

    tasks = [asyncio.create_task(pump(stream)) for stream in streams]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
