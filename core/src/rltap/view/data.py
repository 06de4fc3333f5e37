"""What the viewer's pages show, read from a run's store: the session list, one session's
tree with its rewards before and after discounting, one interaction's messages and tokens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rltap.record.errors import InvalidRequest, NotFound
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.store.read import SESSION_TOTALS, StoreReader

__all__ = ["SORT_KEYS", "interaction_detail", "reward_histogram", "session_list", "session_tree"]

# Sortable columns of the session list, by the name the page uses.
SORT_KEYS = {
    "started": "started", "reward": "reward", "calls": "calls", "errors": "errors",
    "tokens": "generated_tokens", "state": "state", "task": "task_id",
}  # fmt: skip
_MATCHES = """
WHERE (:state IS NULL OR state = :state)
  AND (:query IS NULL OR instr(session_id, :query) > 0 OR instr(coalesce(task_id, ''), :query) > 0)
  AND (:errors = 0 OR errors > 0)
"""


def session_list(
    reader: StoreReader,
    *,
    sort: str = "started",
    descending: bool = False,
    state: str | None = None,
    query: str | None = None,
    errors_only: bool = False,
    limit: int = 200,
    offset: int = 0,
) -> dict[str, Any]:
    """A page of the session list, sorted and filtered in SQL; `total` counts every match."""
    column = SORT_KEYS.get(sort)
    if column is None:
        msg = f"sort must be one of {', '.join(SORT_KEYS)}, got {sort!r}"
        raise InvalidRequest(msg, param="sort")
    params = {"state": state or None, "query": query or None, "errors": int(errors_only)}
    direction = "DESC" if descending else "ASC"
    page = (
        f"SELECT *, count(*) OVER () AS total FROM ({SESSION_TOTALS}) {_MATCHES}"
        f"ORDER BY {column} {direction}, session_id LIMIT :limit OFFSET :offset"
    )
    rows = reader.conn.execute(page, params | {"limit": limit, "offset": offset}).fetchall()
    total = rows[0]["total"] if rows else 0
    states = [row[0] for row in reader.conn.execute("SELECT DISTINCT state FROM sessions")]
    # A sqlite3.Row iterates its values; its keys come from keys().
    sessions = [{key: row[key] for key in row.keys() if key != "total"} for row in rows]  # noqa: SIM118
    return {"total": total, "states": sorted(states), "sessions": sessions}


def _node(node: InteractionWithTokenLogpReward, discounted: float | None) -> dict[str, Any]:
    response = node.model_response
    return {
        "interaction_id": node.interaction_id,
        "parent_id": node.parent_id,
        "link": None if node.link is None else node.link.value,
        "agent_id": node.agent_id,
        "status": node.status.value,
        "error": node.error,
        "reward": node.reward,
        "discounted": discounted,
        "prompt_tokens": 0 if response is None else response.input_len,
        "generated_tokens": 0 if response is None or not node.is_complete else response.output_len,
        "output_text": node.output_text,
    }


def session_tree(reader: StoreReader, session_id: str, discount: float = 1.0) -> dict[str, Any]:
    """The session's interactions as tree nodes (insertion order; parents before children)."""
    stored = reader.session(session_id)
    discounted = stored.cache.apply_reward_discount(discount)  # checks it: 400 `discount`
    nodes = [_node(node, discounted.get(node.interaction_id)) for node in stored.cache.values()]
    return {
        "session_id": stored.session_id,
        "task_id": stored.task_id,
        "state": stored.state,
        "discount": discount,
        "nodes": nodes,
    }


def interaction_detail(
    reader: StoreReader, interaction_id: str, decode: Callable[[int], str] | None
) -> dict[str, Any]:
    """An interaction's messages, reply and generated tokens (id, text, logprob, version)."""
    row = reader.conn.execute(
        "SELECT session_id FROM interactions WHERE interaction_id = ?", (interaction_id,)
    ).fetchone()
    if row is None:
        msg = f"no interaction {interaction_id!r} in {reader.path}"
        raise NotFound(msg, param="interaction_id")
    node = reader.session(row["session_id"]).cache[interaction_id]
    response = node.model_response
    tokens = []
    if response is not None and node.is_complete:
        for token, logprob, version in zip(
            response.output_tokens, response.output_logprobs, response.output_versions, strict=True
        ):
            text = decode(token) if decode is not None else f"<{token}>"
            tokens.append({"id": token, "text": text, "logprob": logprob, "version": version})
    return _node(node, None) | {
        "session_id": row["session_id"],
        "messages": node.messages,
        "output_messages": node.output_message_list,
        "stop_reason": None if response is None else response.stop_reason.value,
        "tokens": tokens,
    }


def reward_histogram(reader: StoreReader, bins: int = 20) -> dict[str, Any]:
    """Sessions' rewards (the sum of their calls' own rewards) in `bins` equal bins."""
    query = "SELECT coalesce(sum(reward), 0.0) FROM interactions GROUP BY session_id"
    rewards = [row[0] for row in reader.conn.execute(query)]
    if not rewards:
        return {"edges": [], "counts": []}
    low, high = min(rewards), max(rewards)
    width = (high - low) / bins if high > low else 1.0
    counts = [0] * bins
    for reward in rewards:
        counts[min(bins - 1, int((reward - low) / width))] += 1
    return {"edges": [low + width * i for i in range(bins + 1)], "counts": counts}
