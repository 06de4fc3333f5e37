"""InteractionCache: one session's interactions, linked into a conversation tree.

A new call's parent and link kind are found by the procedure of `rltap.tree.links`. Its first rule,
the `prefix` link, is the one almost every call takes: the parent is the complete interaction
whose `messages + output_message_list` is the longest prefix of the call's messages, compared in
canonical form (`rltap.tree.canonical`), ties to the interaction inserted last. Each complete
interaction is indexed under the hash-chain value of its whole conversation, so finding it is one
pass over the new call's messages plus one dictionary lookup per prefix: O(M) per insert,
independent of the session's size. When the call repeats the last completed call's messages
verbatim, only the messages after them are hashed. Calls still in flight are not indexed and so
cannot be parents.

Every mutation holds one lock, so concurrent calls of one session keep the tree consistent.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rltap.record.errors import Conflict, InteractionNotFound
from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    ModelResponse,
)
from rltap.tree.canonical import (
    canonical_message,
    context_hash,
    extend_chain,
    extend_chain_canonical,
)
from rltap.tree.export import ExportStyle, export_interactions, export_tree
from rltap.tree.links import LinkIndex, choose_link
from rltap.tree.reward_targets import RewardTargets, reward_targets
from rltap.tree.rewards import (
    Aggregate,
    DiscountMode,
    LinkFactors,
    RewardScope,
    check_reward,
    discount_rewards,
)

if TYPE_CHECKING:
    from rltap.record.pack import TreePack

__all__ = ["CacheJournal", "InteractionCache"]


class CacheJournal(Protocol):
    """Where a cache writes down what it records (`rltap.store`'s durable capture store).

    The hooks run under the cache's lock, so they only hand the work on; `durable` waits until
    everything handed on so far is safe from the process dying."""

    def recorded(self, interaction: InteractionWithTokenLogpReward, order: int) -> None:
        """`interaction` finished (complete, failed or aborted); `order`: its insertion rank."""

    def rewarded(self, interaction_id: str, reward: float) -> None: ...

    async def durable(self) -> None: ...


class InteractionCache(Mapping[str, InteractionWithTokenLogpReward]):
    """Insertion-ordered interactions of one session, keyed by interaction id.

    Usage:
        cache = InteractionCache()
        node = cache.add(InteractionWithTokenLogpReward(messages=messages))
        cache.complete(node.interaction_id, response, output_messages)
        cache.set_last_reward(1.0)
        exported = cache.export_interactions(style="concat", reward_discount=0.9)
    """

    def __init__(self, journal: CacheJournal | None = None) -> None:
        self.journal = journal
        self._items: dict[str, InteractionWithTokenLogpReward] = {}
        self._order: dict[str, int] = {}
        self._roots: dict[str, bytes] = {}
        self._input_hash: dict[str, bytes] = {}
        self._prefix_index: dict[bytes, str] = {}
        self._links = LinkIndex()
        self._last_completed: str | None = None
        self._last_of_agent: dict[str, str] = {}  # an agent's reward goes on its last call
        self._discount: tuple[float, Aggregate, DiscountMode, LinkFactors | None] | None = None
        self._lock = threading.RLock()

    # Mapping interface -------------------------------------------------------------------------
    def __getitem__(self, interaction_id: str) -> InteractionWithTokenLogpReward:
        try:
            return self._items[interaction_id]
        except KeyError:
            msg = f"no interaction {interaction_id!r} in this session"
            raise InteractionNotFound(msg, param="interaction_id") from None

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, interaction_id: object) -> bool:
        return interaction_id in self._items

    def get(  # type: ignore[override]
        self, interaction_id: str, default: InteractionWithTokenLogpReward | None = None
    ) -> InteractionWithTokenLogpReward | None:
        return self._items.get(interaction_id, default)

    def __setitem__(self, interaction_id: str, interaction: InteractionWithTokenLogpReward) -> None:
        """The seed's way to record an interaction: `cache[id] = interaction`. One that carries
        its reply (`model_response` and `output_message_list`) is stored complete."""
        interaction.interaction_id = interaction_id
        replied = (
            interaction.model_response is not None and interaction.output_message_list is not None
        )
        if replied and interaction.status is InteractionStatus.IN_FLIGHT:
            interaction.status = InteractionStatus.COMPLETE
        self.add(interaction)

    # Tree ---------------------------------------------------------------------------------------
    def find_parent(
        self,
        messages: Sequence[Mapping[str, Any]],
        context: bytes | None = None,
        agent: str | None = None,
    ) -> InteractionWithTokenLogpReward | None:
        """The complete interaction this conversation continues by a `prefix` link, or None."""
        with self._lock:
            return _by_agent(self._resolve(messages, context_hash(context))[0], agent)

    def _resolve(
        self, messages: Sequence[Mapping[str, Any]], root: bytes
    ) -> tuple[InteractionWithTokenLogpReward | None, bytes]:
        """The parent of `messages` and the chain hash of all of them.

        Agents mostly send the previous call's messages again, unchanged, plus what came since.
        When the last completed call's messages are a verbatim prefix, its chain hash stands for
        them and only the rest is hashed, so the cost follows what is new, not the history.
        """
        last = self._last_completed
        if last is not None and self._roots[last] == root:
            known = self._items[last].messages
            if 0 < len(known) <= len(messages) and messages[: len(known)] == known:
                tail = extend_chain(self._input_hash[last], messages[len(known) :])
                parent = self._find_parent(tail)
                if parent is not None:
                    return parent, tail[-1] if tail else self._input_hash[last]
        hashes = extend_chain(root, messages)
        return self._find_parent(hashes), hashes[-1] if hashes else root

    def _find_parent(self, hashes: list[bytes]) -> InteractionWithTokenLogpReward | None:
        index = self._prefix_index
        for prefix_hash in reversed(hashes):
            parent_id = index.get(prefix_hash)
            if parent_id is not None:
                return self._items[parent_id]
        return None

    def add(
        self,
        interaction: InteractionWithTokenLogpReward,
        context: bytes | None = None,
        agent: str | None = None,
        *,
        rewrites: bool = False,
    ) -> InteractionWithTokenLogpReward:
        """Insert an interaction, linking it to its parent unless one is set already.

        `context` (e.g. `rltap.tree.canonical.tools_context(tools)`) must match too for a `prefix`
        link: a call with other tools renders another prompt. `agent` is the agent the client
        named (`X-Rltap-Agent`), if any. An interaction added complete (the seed's style) is
        indexed at once; one added with its `parent` set links to it as a `prefix`, unless its
        `link` says otherwise. `rewrites`: the call says it rewrites the conversation it carries
        (a compaction), so rule 2 links it `rewrite`, by the agent of that conversation.
        """
        root = context_hash(context)
        with self._lock:
            interaction_id = interaction.interaction_id
            if interaction_id in self._items:
                msg = f"interaction {interaction_id!r} is already in this session"
                raise Conflict(msg)
            prefix_parent, input_hash = self._resolve(interaction.messages, root)
            # A parent is found unless one is given, or the call is declared a root (a cache
            # restored from its store keeps the tree it had).
            if interaction.parent is None and interaction.link is not Link.ROOT:
                prefix_parent = _by_agent(prefix_parent, agent)
                parent, link, derived, relinked = choose_link(
                    self._links, self._items, interaction, prefix_parent, context, agent, rewrites
                )
                interaction.parent, interaction.link = parent, link
                for node in relinked:  # each one complete: a later call hangs below it
                    self._journal_recorded(node)
            else:
                link = interaction.link = interaction.link or Link.PREFIX
                derived = None if interaction.parent is None else interaction.parent.agent_id
            interaction.agent_id = agent or interaction.agent_id or derived
            parent_id = None if interaction.parent is None else interaction.parent.interaction_id
            self._links.linked(interaction, parent_id, link)
            self._items[interaction_id] = interaction
            self._order[interaction_id] = len(self._order)
            self._roots[interaction_id] = root
            self._input_hash[interaction_id] = input_hash
            if interaction.is_complete:
                self._index(interaction)
                self._journal_recorded(interaction)
        return interaction

    def _index(self, interaction: InteractionWithTokenLogpReward) -> None:
        interaction_id = interaction.interaction_id
        outputs = interaction.output_message_list or []
        # Canonical once: the chain hash of the whole conversation and the reply index share it.
        canonicals = [canonical_message(message) for message in outputs]
        hashes = extend_chain_canonical(self._input_hash[interaction_id], canonicals)
        full_hash = hashes[-1] if hashes else self._input_hash[interaction_id]
        current = self._prefix_index.get(full_hash)
        if current is None or self._order[current] < self._order[interaction_id]:
            self._prefix_index[full_hash] = interaction_id
        self._links.completed(interaction, canonicals)
        self._last_completed = interaction_id
        if interaction.agent_id is not None:
            self._last_of_agent[interaction.agent_id] = interaction_id

    def complete(
        self,
        interaction_id: str,
        model_response: ModelResponse,
        output_messages: list[dict[str, Any]],
    ) -> InteractionWithTokenLogpReward:
        """Record the engine's result; the interaction may be a parent from now on."""
        with self._lock:
            interaction = self[interaction_id]
            if interaction.status is not InteractionStatus.IN_FLIGHT:
                msg = f"interaction {interaction_id} is already {interaction.status}"
                raise Conflict(msg)
            interaction.model_response = model_response
            interaction.output_message_list = output_messages
            interaction.status = InteractionStatus.COMPLETE
            self._index(interaction)
            self._journal_recorded(interaction)
            return interaction

    def fail(self, interaction_id: str, error: str, *, aborted: bool = False) -> None:
        """Mark an in-flight interaction failed or aborted: it is never training data."""
        with self._lock:
            interaction = self[interaction_id]
            if interaction.status is InteractionStatus.IN_FLIGHT:
                interaction.status = (
                    InteractionStatus.ABORTED if aborted else InteractionStatus.FAILED
                )
                interaction.error = error
                self._journal_recorded(interaction)

    def _journal_recorded(self, interaction: InteractionWithTokenLogpReward) -> None:
        if self.journal is not None:
            self.journal.recorded(interaction, self._order[interaction.interaction_id])

    async def durable(self) -> None:
        """Wait until the journal (if any) holds everything recorded so far."""
        if self.journal is not None:
            await self.journal.durable()

    def children(self, interaction_id: str) -> list[InteractionWithTokenLogpReward]:
        return [node for node in self._items.values() if node.parent_id == interaction_id]

    def by_status(self, status: InteractionStatus) -> list[InteractionWithTokenLogpReward]:
        return [node for node in self._items.values() if node.status is status]

    @property
    def last_interaction_id(self) -> str | None:
        """The interaction completed last (in time), the target of `set_last_reward`."""
        return self._last_completed

    # Rewards ------------------------------------------------------------------------------------
    def set_reward(self, interaction_id: str, reward: float) -> None:
        value = check_reward(reward)
        with self._lock:
            self._reward(self[interaction_id].interaction_id, value)

    def set_last_reward(self, reward: float) -> str:
        """Reward the last completed interaction; returns its id."""
        value = check_reward(reward)
        with self._lock:
            if self._last_completed is None:
                msg = "no completed interaction in this session to reward"
                raise InteractionNotFound(msg)
            self._reward(self._last_completed, value)
            return self._last_completed

    def set_rewards(self, rewards: Mapping[str, object]) -> RewardTargets:
        """Rewards by interaction id or by agent (`rltap.tree.reward_targets`); all or none."""
        values = {str(key): check_reward(value) for key, value in rewards.items()}
        with self._lock:
            targets = reward_targets(values, self._items, self._last_of_agent)
            for interaction_id, value in targets.rewards.items():
                self._reward(interaction_id, value)
            return targets

    def _reward(self, interaction_id: str, value: float) -> None:
        self._items[interaction_id].reward = value
        if self.journal is not None:
            self.journal.rewarded(interaction_id, value)

    @property
    def total_reward(self) -> float:
        """Sum of the rewards assigned so far (before discounting)."""
        return sum(node.reward or 0.0 for node in self._items.values())

    def apply_reward_discount(
        self,
        turn_discount: float = 1.0,
        aggregate: Aggregate = "mean",
        mode: DiscountMode = "tree",
        link_factors: LinkFactors | None = None,
    ) -> dict[str, float]:
        """Discounted reward of every complete interaction (`rltap.tree.rewards`).

        The setting is remembered for `export_interactions`; nothing is mutated, so calling this
        again gives the same result.
        """
        with self._lock:
            rewards = discount_rewards(
                self.by_status(InteractionStatus.COMPLETE),
                turn_discount,
                aggregate,
                mode,
                link_factors,
            )
            self._discount = (turn_discount, aggregate, mode, link_factors)
            return rewards

    def export_interactions(
        self,
        style: ExportStyle = "individual",
        reward_discount: float | None = None,
        aggregate: Aggregate | None = None,
        mode: DiscountMode | None = None,
        link_factors: LinkFactors | None = None,
        agents: Collection[str] | None = None,
        reward_scope: RewardScope = "episode",
    ) -> dict[str, InteractionWithTokenLogpReward]:
        """Export copies of the complete interactions with discounted rewards (`rltap.tree.export`).

        Settings left None are those of the last `apply_reward_discount` (discount 1.0, mean,
        tree and every link factor 1.0 if none). Rewards are discounted over the whole tree by
        `reward_scope`; `agents` then keeps only the interactions (concat: sequences) of those.
        """
        with self._lock:
            complete, rewards = self._complete_with_rewards(
                reward_discount, aggregate, mode, link_factors, reward_scope
            )
            return export_interactions(complete, rewards, style, agents)

    def export_tree(
        self,
        reward_discount: float | None = None,
        aggregate: Aggregate | None = None,
        mode: DiscountMode | None = None,
        link_factors: LinkFactors | None = None,
        agents: Collection[str] | None = None,
        reward_scope: RewardScope = "episode",
    ) -> TreePack:
        """The export style `tree`: the complete interactions (of `agents`) in one token trie
        with their discounted rewards (`rltap.record.pack`); settings as `export_interactions`."""
        with self._lock:
            complete, rewards = self._complete_with_rewards(
                reward_discount, aggregate, mode, link_factors, reward_scope
            )
            return export_tree(complete, rewards, agents)

    def _complete_with_rewards(
        self,
        reward_discount: float | None,
        aggregate: Aggregate | None,
        mode: DiscountMode | None,
        link_factors: LinkFactors | None,
        scope: RewardScope,
    ) -> tuple[list[InteractionWithTokenLogpReward], dict[str, float]]:
        """The complete interactions and their rewards (a setting left None: the remembered)."""
        discount, agg, discount_mode, factors = self._discount or (1.0, "mean", "tree", None)
        complete = self.by_status(InteractionStatus.COMPLETE)
        rewards = discount_rewards(
            complete,
            discount if reward_discount is None else reward_discount,
            agg if aggregate is None else aggregate,
            discount_mode if mode is None else mode,
            factors if link_factors is None else link_factors,
            scope,
        )
        return complete, rewards


def _by_agent(
    parent: InteractionWithTokenLogpReward | None, agent: str | None
) -> InteractionWithTokenLogpReward | None:
    """A prefix parent, if the call is the same agent's (always, when it names none)."""
    return parent if parent is not None and agent in (None, parent.agent_id) else None
