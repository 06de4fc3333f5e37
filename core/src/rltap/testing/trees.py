"""What every framework's test asserts of an episode: one tree, the right links, the reward
reaching every call.

`run_session` runs an agent coroutine in a fresh session of a running proxy, sets the reward on
the session's last call, ends the session and returns its export (individual style, discounted).
`assert_one_tree` checks the export's calls form one tree whose link kinds are the ones expected;
`assert_reward_reaches_every_call` checks that every call got a share of the reward.

    items = await run_session(proxy, lambda base_url, api_key: my_agent(base_url, api_key))
    assert_one_tree(items, ["root", "prefix", "carry"])
    assert_reward_reaches_every_call(items)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from rltap.testing.proxy import RunningProxy

__all__ = [
    "AgentCall",
    "assert_one_tree",
    "assert_reward_reaches_every_call",
    "link_kinds",
    "run_session",
]

AgentCall = Callable[[str, str], Awaitable[Any]]  # (base_url, api_key) -> the agent's result


async def run_session(
    proxy: RunningProxy,
    agent: AgentCall,
    *,
    reward: float = 1.0,
    discount: float = 0.9,
) -> list[dict[str, Any]]:
    """Run `agent(base_url, api_key)` in a new session; reward its last call; the export."""
    session_id, key = await proxy.start_session()
    await agent(proxy.base_url, key)
    rewarded = await proxy.session_post(key, "/rl/set_reward", {"reward": reward})
    assert rewarded.status_code == 200, rewarded.text
    ended = await proxy.session_post(key, "/rl/end_session")
    assert ended.status_code == 200, ended.text
    export = await proxy.export(session_id, discount=discount)
    items: list[dict[str, Any]] = export["interactions"]
    return items


def link_kinds(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The link kind of each exported call, in the order the calls were made."""
    return [str(item["link"]) for item in items]


def assert_one_tree(items: Sequence[Mapping[str, Any]], links: Sequence[str] | None = None) -> None:
    """The calls form one tree: one root, every other call's parent among them.

    `links`: the link kinds expected, in call order when the calls are made one after another
    (compared as a multiset: concurrent calls finish in any order).
    """
    assert items, "the episode recorded no call"
    ids = {item["interaction_id"] for item in items}
    roots = [item["interaction_id"] for item in items if item.get("parent_id") is None]
    summary = [(item["interaction_id"], item["link"], item.get("parent_id")) for item in items]
    assert len(roots) == 1, f"{len(roots)} trees, not one: {summary}"
    strays = [item["interaction_id"] for item in items if item.get("parent_id") not in {*ids, None}]
    assert not strays, f"parents outside the episode: {strays}"
    if links is not None:
        assert Counter(link_kinds(items)) == Counter(links), (
            f"links {link_kinds(items)}, expected {list(links)}"
        )


def assert_reward_reaches_every_call(items: Sequence[Mapping[str, Any]]) -> None:
    """Every call's exported (discounted) reward is positive: the reward set on the last call
    flowed back to each of them."""
    cold = [(item["interaction_id"], item["link"], item.get("reward")) for item in items]
    cold = [entry for entry in cold if not entry[2] or entry[2] <= 0]
    assert not cold, f"calls the reward did not reach: {cold}"
