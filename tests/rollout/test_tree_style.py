"""Style "tree" in workflows and rollouts: a group's episodes as one trie; a rollout hands on
the packs the proxy exported (a row's episodes merged), writes its files from them (its lines
per interaction, its batch one pack per row), and reads them back only to resume."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import httpx
from pack_testing import pack_contents
from rich.console import Console

from rltap.config import EpisodeConfig
from rltap.record.pack import TreePack, merge_tries
from rltap.record.pack_io import decode_pack, load_packs
from rltap.rollout.runner import BATCH, load_trajectories, run_rollout
from rltap.rollout.workflow import (
    GroupedRolloutWorkflow,
    OpenAIProxyWorkflow,
    WorkflowSettings,
    resolve_workflow,
)
from rltap.testing.proxy import RunningProxy

AgentSpec = Callable[[str], str]


async def test_a_group_of_episodes_is_one_trie(proxy: RunningProxy, agent_spec: AgentSpec) -> None:
    group = resolve_workflow(
        agent_spec("ChatAgent"),
        group_size=2,
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=WorkflowSettings(episodes=EpisodeConfig(discount=0.9), style="tree"),
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


class ExportsSeen:
    """An HTTP client for the workflow that keeps the pack of every `/export_trajectories`
    body the proxy sent, decoded here on its own, by the session's first interaction."""

    def __init__(self) -> None:
        self.packs: list[TreePack] = []
        self.http = httpx.AsyncClient(timeout=120, event_hooks={"response": [self._note]})

    async def _note(self, response: httpx.Response) -> None:
        if response.request.url.path == "/export_trajectories":
            await response.aread()
            self.packs.append(decode_pack(response.json()["tree"]))


async def test_a_rollout_hands_on_the_packs_the_proxy_exported_and_writes_them(
    proxy: RunningProxy, agent_spec: AgentSpec, tmp_path: Path
) -> None:
    seen = ExportsSeen()
    workflow = resolve_workflow(
        agent_spec("ChatAgent"),
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=WorkflowSettings(style="tree"),
        http_client=seen.http,
    )
    assert isinstance(workflow, OpenAIProxyWorkflow)
    rows = [{"question": "a", "reward": 0.5}, {"question": "b", "reward": 1.0}]
    console = Console(file=io.StringIO())
    try:
        batch = await run_rollout(workflow, rows, tmp_path, group_size=2, console=console)
    finally:
        await workflow.aclose()
        await seen.http.aclose()
    assert batch.summary.episodes_ok == 4
    assert len(seen.packs) == 4
    assert len(batch.packs) == 2  # one per row: its two episodes in one trie
    for row, pack in enumerate(batch.packs):
        exported = [p for p in seen.packs if set(p.interaction_ids) <= set(pack.interaction_ids)]
        assert len(exported) == 2
        # The row's trie is the two exports merged: their tokens, logprobs, versions and
        # rewards unchanged, the prompt they share once.
        assert pack_contents(pack) == pack_contents(merge_tries(exported))
        assert sorted(leaf.reward for leaf in pack.leaves) == [rows[row]["reward"]] * 2
    # The files are written from the batch: batch.safetensors holds the same packs, and the
    # lines (one per interaction, each its own prompt and output) are the batch's.
    assert [pack_contents(p) for p in load_packs(tmp_path / BATCH)] == [
        pack_contents(p) for p in batch.packs
    ]
    lines = load_trajectories(tmp_path)
    assert lines == batch.lines
    assert len(lines) == 8  # 2 rows x 2 episodes x 2 calls, one line each
    for row, pack in enumerate(batch.packs):
        by_id = {line["interaction_id"]: line for line in lines if line["row"] == row}
        assert sorted(pack.interaction_ids) == sorted(by_id)
        # A line holds its own prompt and output; a leaf (a second call) its whole branch.
        for leaf in pack.leaves:
            assert pack.leaf_sequence(leaf).tolist() == by_id[leaf.interaction_id]["input_ids"]


async def test_a_resumed_rollout_reads_back_the_packs_of_the_rows_it_finished(
    proxy: RunningProxy, agent_spec: AgentSpec, tmp_path: Path
) -> None:
    workflow = resolve_workflow(
        agent_spec("ChatAgent"),
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=WorkflowSettings(style="tree"),
    )
    assert isinstance(workflow, OpenAIProxyWorkflow)
    rows = [{"question": "a", "reward": 0.1}, {"question": "b", "reward": 0.3}]
    console = Console(file=io.StringIO())
    try:
        first = await run_rollout(workflow, rows[:1], tmp_path, group_size=2, console=console)
        # The same folder with one row more: row 0 is read back, row 1 runs.
        resumed = await run_rollout(workflow, rows, tmp_path, group_size=2, console=console)
    finally:
        await workflow.aclose()
    assert resumed.summary.rows_skipped == 1
    assert resumed.summary.episodes_ok == 4
    assert len(resumed.packs) == 2
    # Row 0's pack, rebuilt from its lines, is the one the first run had from the proxy (but
    # for its leaves' rewards, which the lines hold as float32); row 1's is the proxy's.
    assert pack_contents(resumed.packs[0]) == pack_contents(first.packs[0], float32_rewards=True)
    assert resumed.lines[: len(first.lines)] == first.lines
    assert [pack_contents(p) for p in load_packs(tmp_path / BATCH)] == [
        pack_contents(p) for p in resumed.packs
    ]
