"""An interaction as a row of the capture store, and back.

`interaction_row` builds a finished call's row where it finished (12 us for a 200-token prompt:
cheaper than shipping the object to the writer process); `restore_cache` rebuilds a session's
`InteractionCache` from its rows, with the tree it had: each parent and link as recorded, every
reward, every status.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

import orjson

from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    LogprobConvention,
    ModelResponse,
    StopReason,
)
from rltap.store.codec import float_blob, floats, int_blob, ints
from rltap.store.schema import interaction_columns
from rltap.tree.cache import InteractionCache
from rltap.tree.canonical import tools_context

__all__ = [
    "COLUMNS",
    "INSERT_INTERACTION",
    "SELECT_INTERACTIONS",
    "StoredSession",
    "interaction_row",
    "load_session",
    "restore_cache",
    "selected_columns",
]

COLUMNS = (
    "interaction_id", "session_id", "seq", "parent_id", "link", "agent_id", "status", "error",
    "reward", "created", "input_len", "output_len", "max_version", "latency", "stop_reason",
    "logprob_convention", "constrained", "chat_template", "instruction_messages", "messages",
    "output_messages", "tools", "input_ids", "output_ids", "logprobs", "versions", "policy",
)  # fmt: skip
INSERT_INTERACTION = (
    f"INSERT OR REPLACE INTO interactions ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(COLUMNS))})"
)
SELECT_INTERACTIONS = f"SELECT {', '.join(COLUMNS)} FROM interactions"


def selected_columns(conn: sqlite3.Connection, table: str = "") -> str:
    """`COLUMNS` as a SELECT list (each prefixed `table.`), a column the store lacks (one
    `ADDED_COLUMNS` adds, in a store written before it) as NULL."""
    present = interaction_columns(conn)
    prefix = f"{table}." if table else ""
    return ", ".join(
        f"{prefix}{name}" if name in present else f"NULL AS {name}" for name in COLUMNS
    )


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def interaction_row(
    session_id: str, node: InteractionWithTokenLogpReward, order: int
) -> tuple[Any, ...]:
    """The values of `COLUMNS` for a finished interaction."""
    head = (
        node.interaction_id, session_id, order, node.parent_id,
        None if node.link is None else node.link.value, node.agent_id, node.status.value,
        node.error, node.reward, node.created,
    )  # fmt: skip
    tail = (
        int(node.constrained), node.chat_template_type, node.instruction_messages,
        _json(node.messages), _json(node.output_message_list), _json(node.tools),
    )  # fmt: skip
    return (*head, *_token_columns(node), *tail, *_token_blobs(node), node.policy)


def _token_columns(node: InteractionWithTokenLogpReward) -> tuple[Any, ...]:
    """input_len, output_len, max_version, latency, stop_reason, logprob_convention."""
    response = node.model_response
    if response is None:
        return (0, 0, -1, 0.0, None, None)
    if not node.is_complete:  # failed after the prompt was rendered: the prompt only
        return (response.input_len, 0, -1, response.latency, None, None)
    return (
        response.input_len, response.output_len, max(response.output_versions, default=-1),
        response.latency, response.stop_reason.value, response.logprob_convention.value,
    )  # fmt: skip


def _token_blobs(node: InteractionWithTokenLogpReward) -> tuple[bytes | None, ...]:
    """input_ids, output_ids, logprobs, versions."""
    response = node.model_response
    if response is None:
        return (None, None, None, None)
    if not node.is_complete:
        return (int_blob(response.input_tokens), None, None, None)
    return (
        int_blob(response.input_tokens),
        int_blob(response.output_tokens),
        float_blob(response.output_logprobs),
        int_blob(response.output_versions),
    )


def _response(row: sqlite3.Row) -> ModelResponse | None:
    if row["output_ids"] is None:
        return None
    return ModelResponse(
        input_tokens=ints(row["input_ids"]),
        output_tokens=ints(row["output_ids"]),
        output_logprobs=floats(row["logprobs"]),
        output_versions=ints(row["versions"]),
        stop_reason=StopReason(row["stop_reason"]),
        logprob_convention=LogprobConvention(row["logprob_convention"]),
        constrained=bool(row["constrained"]),
        latency=row["latency"],
    )


def restore_cache(rows: Iterable[sqlite3.Row]) -> InteractionCache:
    """A session's cache from its rows (in `seq` order); it journals nothing."""
    cache = InteractionCache()
    built: dict[str, InteractionWithTokenLogpReward] = {}
    for row in rows:
        tools = orjson.loads(row["tools"]) if row["tools"] is not None else None
        parent = built.get(row["parent_id"] or "")
        node = InteractionWithTokenLogpReward(
            model_response=_response(row),
            reward=row["reward"],
            parent=parent,
            link=Link(row["link"]) if row["link"] else Link.ROOT,
            agent_id=row["agent_id"],
            policy=row["policy"],
            messages=orjson.loads(row["messages"]),
            instruction_messages=row["instruction_messages"],
            output_message_list=orjson.loads(row["output_messages"] or "null"),
            tools=tools,
            chat_template_type=row["chat_template"],
            interaction_id=row["interaction_id"],
            created=row["created"],
            status=InteractionStatus(row["status"]),
            error=row["error"],
        )
        if parent is None and row["parent_id"] is not None:
            node.link, node.detached_parent_id = Link.ROOT, row["parent_id"]
        built[node.interaction_id] = cache.add(node, tools_context(tools), row["agent_id"])
    return cache


class StoredSession:
    """A session read back from a store: its row and its restored cache."""

    def __init__(self, row: sqlite3.Row, cache: InteractionCache) -> None:
        self.session_id: str = row["session_id"]
        self.task_id: str | None = row["task_id"]
        self.state: str = row["state"]
        self.exported: float | None = row["exported"]
        self.cache = cache


def load_session(conn: sqlite3.Connection, session_id: str) -> StoredSession | None:
    conn.row_factory = sqlite3.Row
    row = conn.execute("SELECT * FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    if row is None:
        return None
    query = f"SELECT {selected_columns(conn)} FROM interactions WHERE session_id = ? ORDER BY seq"
    return StoredSession(row, restore_cache(conn.execute(query, (session_id,))))
