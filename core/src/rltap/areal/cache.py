"""AReaL's `InteractionCache`: rltap's conversation tree with AReaL 1.0.4's reward contract.

What differs from `rltap.InteractionCache` is only what AReaL's callers rely on:

- `InteractionCache(items)` / `InteractionCache(**items)` fills it as a dict would.
- Its interactions are `rltap.areal.types.InteractionWithTokenLogpReward`, with AReaL's
  `completion` and `response`: the calls a session records in it too.
- An interaction stored AReaL's way, `cache[id] = InteractionWithTokenLogpReward(...)`, is
  complete once it carries both a `model_response` and an `output_message_list`, whether set
  before storing it or afterwards on the stored object; a response of AReaL's own class is read
  into rltap's. Any other object is kept as given, as AReaL duck-types it (its tests store
  MagicMocks): it links and exports by its messages, and its tensors (or those of a concat
  branch it is on) are a ValueError saying so, never made up.
- `apply_reward_discount(turn_discount)` discounts in insertion order ("chain": AReaL's
  numbers), writes the discounted reward into each interaction, and may be called only once
  (after that a RuntimeError with AReaL's text). `rltap.InteractionCache` discounts along the
  tree and never mutates.
- `export_interactions(style, reward_discount=None)` exports copies with the rewards as they
  stand (None where none was set; discounting first when `reward_discount` is given and nothing
  was discounted yet). Within one export the copies link to each other as AReaL's objects do:
  `exported[child].parent is exported[parent]` wherever both are exported (every parent in
  `individual`); a `concat` leaf's parent, not exported, is the cached interaction. `concat`
  needs every interaction rendered with `chat_template_type="concat"`; a bad style is a
  ValueError. As AReaL's `to_tensor_dict` walks the parents of a concat-rendered call, such a
  call's `individual` copy trains on its whole branch too, as its `concat` leaf would; a branch
  whose tokens break is `ExportMismatch` from that copy's `to_tensor_dict()` (from the export
  itself in `concat`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rltap.areal.io_struct import to_rltap_response
from rltap.areal.types import InteractionWithTokenLogpReward, as_areal
from rltap.record.errors import ExportMismatch, InvalidRequest
from rltap.record.types import InteractionStatus, TokenSequence
from rltap.record.types import InteractionWithTokenLogpReward as RecordedInteraction
from rltap.record.types import ModelResponse as RltapResponse
from rltap.tree.cache import InteractionCache as TreeCache
from rltap.tree.export import branch_sequence, concat_leaves
from rltap.tree.reward_targets import RewardTargets

__all__ = ["InteractionCache"]

_STYLES = ("individual", "concat")


def _readable(response: Any) -> Any:
    """rltap's response for anything that reads as AReaL's; any other object as given."""
    try:
        return to_rltap_response(response)
    except (TypeError, ValueError):
        return response


@dataclass(slots=True, kw_only=True)
class _Refused(TokenSequence):
    """The export sequence of an interaction whose tensors cannot be built: `to_tensor_dict()`
    raises `error` (the export itself, its ids, rewards and parents, still stands)."""

    error: Exception

    def to_arrays(self, reward: float) -> dict[str, np.ndarray]:
        raise self.error


def _on_branch(node: RecordedInteraction, style: str) -> bool:
    """Whether `node`'s tensors are its branch: a concat export's leaf, or, as AReaL's
    `to_tensor_dict` walks the parents of a concat-rendered call, one continuing its parent."""
    return style == "concat" or (
        node.chat_template_type == "concat" and node.token_parent is not None
    )


def _export_sequence(node: RecordedInteraction, style: str) -> TokenSequence | None:
    """What the export copy of `node` trains on; None for its own prompt and reply."""
    along = _on_branch(node, style)
    branch = [node]
    while along and (above := branch[-1].token_parent) is not None:
        branch.append(above)
    for member in branch:
        response = member.model_response
        if not isinstance(response, RltapResponse):
            reason = (
                f"interaction {member.interaction_id}'s model_response is a "
                f"{type(response).__name__} that does not read as a ModelResponse (token ids, "
                "logprobs and versions of one length, an AReaL stop_reason): it has no tensors"
            )
            return _Refused(error=ValueError(reason))
    if not along:
        return None
    if style == "concat":
        return branch_sequence(node)  # a broken prefix fails the export, as rltap's does
    try:
        return branch_sequence(node)
    except ExportMismatch as exc:
        return _Refused(error=exc)


def _export(complete: Sequence[RecordedInteraction], style: str) -> dict[str, RecordedInteraction]:
    """Copies of `complete` (`concat`: its leaves) as AReaL hands them out: rewards as they
    stand (None where none was set), and a copy's `parent` the exported copy of its parent
    wherever the export holds that too, so the copies form the tree the cache holds."""
    nodes = concat_leaves(complete) if style == "concat" else complete
    exported = {
        node.interaction_id: node.copy_for_export(
            reward=node.reward, sequence=_export_sequence(node, style)
        )
        for node in nodes
    }
    for node in exported.values():
        if node.parent is not None and (twin := exported.get(node.parent.interaction_id)):
            node.parent = twin
    return exported


class InteractionCache(TreeCache):
    """Interactions of one episode keyed by id, with AReaL's chain discount (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._discounted = False
        # Stored AReaL's way without a reply yet: completed when a reply is set on them.
        self._pending: list[str] = []
        for interaction_id, interaction in dict(*args, **kwargs).items():
            self[interaction_id] = interaction

    def add(
        self,
        interaction: RecordedInteraction,
        context: bytes | None = None,
        agent: str | None = None,
        *,
        rewrites: bool = False,
    ) -> InteractionWithTokenLogpReward:
        """`rltap.tree.cache.InteractionCache.add`, the interaction made AReaL's class first."""
        areal = as_areal(interaction)
        super().add(areal, context, agent, rewrites=rewrites)
        return areal

    def __setitem__(self, interaction_id: str, interaction: RecordedInteraction) -> None:
        self._complete_pending()
        if interaction.model_response is not None:
            interaction.model_response = _readable(interaction.model_response)
        super().__setitem__(interaction_id, interaction)
        if interaction.status is InteractionStatus.IN_FLIGHT:
            self._pending.append(interaction_id)

    def _complete_pending(self) -> None:
        """Complete what AReaL-style code finished by setting attributes on stored objects."""
        still = []
        for interaction_id in self._pending:
            interaction = self[interaction_id]
            response, outputs = interaction.model_response, interaction.output_message_list
            if interaction.status is not InteractionStatus.IN_FLIGHT:
                continue  # completed (or failed) the rltap way
            if response is None or outputs is None:
                still.append(interaction_id)
            else:
                self.complete(interaction_id, _readable(response), outputs)
        self._pending = still

    @property
    def last_interaction_id(self) -> str | None:
        self._complete_pending()
        return super().last_interaction_id

    def set_reward(self, interaction_id: str, reward: float) -> None:
        self._complete_pending()
        super().set_reward(interaction_id, reward)

    def set_last_reward(self, reward: float) -> str:
        self._complete_pending()
        return super().set_last_reward(reward)

    def set_rewards(self, rewards: Mapping[str, object]) -> RewardTargets:
        self._complete_pending()
        return super().set_rewards(rewards)

    def apply_reward_discount(  # type: ignore[override]
        self, turn_discount: float = 1.0
    ) -> dict[str, InteractionWithTokenLogpReward]:
        """Chain-discount the rewards in place, once; returns the complete interactions."""
        if self._discounted:
            # AReaL's exact text: its tests match it.
            msg = "apply_reward_discount should only be called once."
            raise RuntimeError(msg)
        self._complete_pending()
        discounted = super().apply_reward_discount(turn_discount, mode="chain")
        with self._lock:
            for interaction_id, reward in discounted.items():
                self[interaction_id].reward = reward
            self._discounted = True
        return {interaction_id: as_areal(self[interaction_id]) for interaction_id in discounted}

    def export_interactions(  # type: ignore[override]
        self, style: str, reward_discount: float | None = None
    ) -> dict[str, InteractionWithTokenLogpReward]:
        """Copies of the complete interactions (`concat`: the leaves), rewards as they stand."""
        if style not in _STYLES:
            msg = f"Invalid export interactions style {style!r}; expected one of {_STYLES}"
            raise InvalidRequest(msg, param="style")
        if reward_discount is not None and not self._discounted:
            self.apply_reward_discount(turn_discount=reward_discount)
        self._complete_pending()
        with self._lock:
            complete = self.by_status(InteractionStatus.COMPLETE)
            if style == "concat" and any(n.chat_template_type != "concat" for n in complete):
                msg = (
                    "Cannot export interactions in 'concat' style unless every interaction "
                    "was rendered with chat_template_type='concat'; use 'individual'"
                )
                raise InvalidRequest(msg, param="style")
            return {key: as_areal(node) for key, node in _export(complete, style).items()}
