"""The capture store's `policy` column, added since schema 1: a store written before it reads
back with no policy, and the first writer that opens it adds the column."""

from __future__ import annotations

from pathlib import Path

from rltap.record.types import InteractionStatus, InteractionWithTokenLogpReward, ModelResponse
from rltap.store.read import StoreReader
from rltap.store.rows import INSERT_INTERACTION, interaction_row
from rltap.store.schema import connect, interaction_columns


def _call(policy: str | None) -> InteractionWithTokenLogpReward:
    return InteractionWithTokenLogpReward(
        messages=[{"role": "user", "content": "hi"}],
        output_message_list=[{"role": "assistant", "content": "yo"}],
        model_response=ModelResponse(
            input_tokens=[1, 2], output_tokens=[3], output_logprobs=[-0.5], output_versions=[4]
        ),
        status=InteractionStatus.COMPLETE,
        policy=policy,
    )


def test_a_store_without_the_column_reads_none_until_a_writer_adds_it(tmp_path: Path) -> None:
    path = tmp_path / "capture.sqlite"
    conn = connect(path)
    conn.execute("INSERT INTO sessions (session_id, state, started) VALUES ('s', 'ended', 0)")
    old = _call(None)
    conn.execute(INSERT_INTERACTION, interaction_row("s", old, 0))
    conn.execute("ALTER TABLE interactions DROP COLUMN policy")  # as schema 1 wrote it
    conn.close()
    with StoreReader(path) as reader:
        assert "policy" not in interaction_columns(reader.conn)
        assert not reader.has_policies()
        assert reader.session("s").cache[old.interaction_id].policy is None
        assert [stored.cache[old.interaction_id].policy for stored in reader.sessions()] == [None]

    conn = connect(path)  # a writer: the column comes back
    assert "policy" in interaction_columns(conn)
    new = _call("tutor")
    conn.execute(INSERT_INTERACTION, interaction_row("s", new, 1))
    conn.close()
    with StoreReader(path) as reader:
        assert reader.has_policies()
        cache = reader.session("s").cache
        assert (cache[old.interaction_id].policy, cache[new.interaction_id].policy) == (
            None,
            "tutor",
        )
