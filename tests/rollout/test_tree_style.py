"""Style "tree" in workflows and rollouts: a group's episodes as one trie, the rollout's lines
per interaction and its batch one pack per row."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from rltap.record.pack import TreePack
from rltap.record.pack_io import load_packs
from rltap.rollout.runner import BATCH, load_trajectories, run_rollout
from rltap.rollout.workflow import GroupedRolloutWorkflow, OpenAIProxyWorkflow, resolve_workflow
from rltap.testing.proxy import RunningProxy

AgentSpec = Callable[[str], str]


async def test_a_group_of_episodes_is_one_trie(proxy: RunningProxy, agent_spec: AgentSpec) -> None:
    group = resolve_workflow(
        agent_spec("ChatAgent"),
        group_size=2,
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        style="tree",
        discount=0.9,
    )
    assert isinstance(group, GroupedRolloutWorkflow)
    try:
        pack = await group.arun_episode(None, {"question": "q", "reward": 1.0})
    finally:
        assert isinstance(group.workflow, OpenAIProxyWorkflow)
        await group.workflow.aclose()
    assert isinstance(pack, TreePack)
    assert len(pack.interaction_ids) == 4
    first, second = pack.leaves  # each episode's second call, which continues its first
    assert [first.reward, second.reward] == [1.0, 1.0]
    # The echo script answers both episodes alike, yet each keeps its own generated tokens:
    # they share exactly the first call's prompt.
    assert pack.leaf_sequence(first).tolist() == pack.leaf_sequence(second).tolist()
    shared = int((first.path == second.path).sum())
    assert first.path[:shared].tolist() == second.path[:shared].tolist()
    assert (pack.loss_mask[first.path[:shared]] == 0).all()
    assert pack.loss_mask[first.path[shared]] == 1
    assert len(pack) == 2 * len(first.path) - shared


async def test_rollout_with_style_tree_writes_lines_and_one_pack_per_row(
    proxy: RunningProxy, agent_spec: AgentSpec, tmp_path: Path
) -> None:
    workflow = resolve_workflow(
        agent_spec("ChatAgent"), proxy_addr=proxy.url, admin_key=proxy.admin_key, style="tree"
    )
    assert isinstance(workflow, OpenAIProxyWorkflow)
    rows = [{"question": "a", "reward": 0.5}, {"question": "b", "reward": 1.0}]
    console = Console(file=io.StringIO())
    try:
        summary = await run_rollout(workflow, rows, tmp_path, group_size=2, console=console)
    finally:
        await workflow.aclose()
    assert summary.episodes_ok == 4
    lines = load_trajectories(tmp_path)
    assert len(lines) == 8  # 2 rows x 2 episodes x 2 calls, one line each
    packs = load_packs(tmp_path / BATCH)
    assert len(packs) == 2
    for row, pack in enumerate(packs):
        mine = [line for line in lines if line["row"] == row]
        by_id = {line["interaction_id"]: line for line in mine}
        assert sorted(pack.interaction_ids) == sorted(by_id)
        # A line holds its own prompt and output; a leaf (a second call) its whole branch.
        for leaf in pack.leaves:
            assert pack.leaf_sequence(leaf).tolist() == by_id[leaf.interaction_id]["input_ids"]
            assert leaf.reward == rows[row]["reward"]
        assert int(pack.loss_mask.sum()) == sum(sum(line["loss_mask"]) for line in mine)
        assert len(pack) < sum(len(pack.leaf_sequence(leaf)) for leaf in pack.leaves)
