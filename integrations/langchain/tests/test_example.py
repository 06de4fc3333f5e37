"""examples/langchain_math runs as its README says, and pickles for subprocess mode."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from rltap.testing import RunningProxy
from rltap.workflow import OpenAIProxyWorkflow, resolve_workflow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_math"


async def test_math_chain_rewards_the_calculators_answer(proxy: RunningProxy) -> None:
    workflow = resolve_workflow(
        f"{EXAMPLE / 'agent.py'}:Agent", proxy_addr=proxy.url, admin_key=proxy.admin_key
    )
    assert isinstance(workflow, OpenAIProxyWorkflow)
    agent = pickle.loads(pickle.dumps(workflow.agent))
    rows = [json.loads(line) for line in (EXAMPLE / "data.jsonl").read_text().splitlines()]
    try:
        # The script's calculator call is 2+3: rows answering 5 earn 1.0, the others 0.0.
        for row in (rows[0], rows[1]):
            assert await agent.run(row, base_url=proxy.base_url, api_key=await _key(proxy)) == (
                1.0 if row["answer"] == "5" else 0.0
            )
        episode = await workflow.run_episode(rows[0])
    finally:
        await workflow.aclose()
    assert episode.interactions is not None
    first, second = episode.interactions.values()
    assert second.parent is first
    assert second.reward == 1.0


async def _key(proxy: RunningProxy) -> str:
    _, key = await proxy.start_session()
    return key
