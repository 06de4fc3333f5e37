"""Link kinds as the store keeps them and Parquet shows them: a `carry` link, and a call rule 4
relinked `subagent` after it was first recorded (the store holds the relinked kind)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rltap.record.types import InteractionWithTokenLogpReward, ModelResponse
from rltap.store.files import export_store
from rltap.store.rows import INSERT_INTERACTION, interaction_row
from rltap.store.schema import connect
from rltap.tree.cache import InteractionCache

SESSION = "session-with-a-managed-agent"
TASK = "Find the capital city of France and give its name"
CODE = f'Thought: ask the searcher.\n<code>\nsearcher(task="{TASK}")\n'


class StoreJournal:
    """What the capture store's writer does with a cache's records, in this process."""

    def __init__(self, path: Path) -> None:
        self.conn = connect(path)
        started = time.time()
        self.conn.execute(
            "INSERT INTO sessions VALUES (?, NULL, 'managed', 'ended', ?, ?, NULL)",
            (SESSION, started, started),
        )

    def recorded(self, interaction: InteractionWithTokenLogpReward, order: int) -> None:
        self.conn.execute(INSERT_INTERACTION, interaction_row(SESSION, interaction, order))

    def rewarded(self, interaction_id: str, reward: float) -> None:
        sql = "UPDATE interactions SET reward = ? WHERE interaction_id = ?"
        self.conn.execute(sql, (reward, interaction_id))

    async def durable(self) -> None:
        return None


def call(cache: InteractionCache, messages: list[dict[str, Any]], reply: str) -> str:
    node = cache.add(InteractionWithTokenLogpReward(messages=messages))
    parent = node.token_parent
    above = [] if parent is None or parent.model_response is None else parent.model_response
    prefix = [] if not above else above.input_tokens + above.output_tokens
    response = ModelResponse(
        input_tokens=[*prefix, 7], output_tokens=[8, 9], output_logprobs=[-0.5, -0.25],
        output_versions=[1, 1],
    )  # fmt: skip
    cache.complete(node.interaction_id, response, [{"role": "assistant", "content": reply}])
    return node.interaction_id


def test_parquet_shows_carry_and_the_relinked_subagent(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    store = tmp_path / "capture.sqlite"
    journal = StoreJournal(store)
    cache = InteractionCache(journal)
    manager = [{"role": "system", "content": "Manager."}, {"role": "user", "content": "Capital?"}]
    m1 = call(cache, manager, CODE)
    searcher = [{"role": "system", "content": "Searcher."}, {"role": "user", "content": TASK}]
    s1 = call(cache, searcher, "It is Paris.")
    s2 = call(
        cache,
        [
            *searcher,
            {"role": "assistant", "content": "It is Paris."},
            {"role": "user", "content": "Sure?"},
        ],
        "Yes.",
    )
    sent_back = {"role": "assistant", "content": f"{CODE}</code>\nCalling tools: [python]"}
    m2 = call(
        cache, [*manager, sent_back, {"role": "user", "content": "Observation: Paris"}], "Paris"
    )
    cache.set_reward(m2, 1.0)
    journal.conn.close()

    out = export_store(tmp_path, tmp_path / "all.parquet", discount=0.9).path
    rows = pq.read_table(out).to_pylist()
    assert [(r["interaction_id"], r["link"], r["parent_id"]) for r in rows] == [
        (m1, "root", None),
        (s1, "subagent", m1),
        (s2, "prefix", s1),
        (m2, "carry", m1),
    ]
    # float32 in the file
    assert [r["reward"] for r in rows] == pytest.approx([0.9, 0.81, 0.9, 1.0])
