"""The viewer's tree nodes and interaction detail name each call's policy (the page colours a
node by it), and say nothing of one for a call of no policy."""

from __future__ import annotations

from pathlib import Path

from rltap.record.types import InteractionStatus, InteractionWithTokenLogpReward, ModelResponse
from rltap.store.read import StoreReader
from rltap.store.rows import INSERT_INTERACTION, interaction_row
from rltap.store.schema import connect
from rltap.view.data import interaction_detail, session_tree


def test_nodes_and_detail_name_the_policy_of_a_call_that_has_one(tmp_path: Path) -> None:
    path = tmp_path / "capture.sqlite"
    conn = connect(path)
    conn.execute("INSERT INTO sessions (session_id, state, started) VALUES ('s', 'ended', 0)")
    calls = []
    for order, policy in enumerate(["tutor", None]):
        call = InteractionWithTokenLogpReward(
            messages=[{"role": "user", "content": f"hi {order}"}],
            output_message_list=[{"role": "assistant", "content": "yo"}],
            model_response=ModelResponse(
                input_tokens=[1, 2], output_tokens=[3], output_logprobs=[-0.5], output_versions=[4]
            ),
            status=InteractionStatus.COMPLETE,
            policy=policy,
        )
        conn.execute(INSERT_INTERACTION, interaction_row("s", call, order))
        calls.append(call)
    conn.close()
    with StoreReader(path) as reader:
        nodes = session_tree(reader, "s")["nodes"]
        assert [node.get("policy") for node in nodes] == ["tutor", None]
        assert "policy" not in nodes[1]
        assert interaction_detail(reader, calls[0].interaction_id, None)["policy"] == "tutor"
        assert "policy" not in interaction_detail(reader, calls[1].interaction_id, None)
