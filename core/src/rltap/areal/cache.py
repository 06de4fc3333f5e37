"""AReaL's `InteractionCache`: rltap's conversation tree with AReaL 1.0.4's reward contract.

What differs from `rltap.InteractionCache` is only what AReaL's callers rely on:

- `InteractionCache(items)` / `InteractionCache(**items)` fills it as a dict would.
- An interaction stored AReaL's way, `cache[id] = InteractionWithTokenLogpReward(...)`, is
  complete once it carries both a `model_response` and an `output_message_list`, whether set
  before storing it or afterwards on the stored object; a response of AReaL's own class is read
  into rltap's.
- `apply_reward_discount(turn_discount)` discounts in insertion order ("chain": AReaL's
  numbers), writes the discounted reward into each interaction, and may be called only once
  (RuntimeError after that). `rltap.InteractionCache` discounts along the tree and never
  mutates.
- `export_interactions(style, reward_discount=None)` exports the rewards as they stand
  (discounting first when `reward_discount` is given and nothing was discounted yet); `concat`
  needs every interaction rendered with `chat_template_type="concat"`; a bad style is a
  ValueError.
"""

from __future__ import annotations

from typing import Any, cast

from rltap.areal.io_struct import to_rltap_response
from rltap.cache import InteractionCache as TreeCache
from rltap.export import ExportStyle, export_interactions
from rltap.record.errors import InvalidRequest
from rltap.record.types import InteractionStatus, InteractionWithTokenLogpReward

__all__ = ["InteractionCache"]

_STYLES = ("individual", "concat")


class InteractionCache(TreeCache):
    """Interactions of one episode keyed by id, with AReaL's chain discount (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._discounted = False
        # Stored AReaL's way without a reply yet: completed when a reply is set on them.
        self._pending: list[str] = []
        for interaction_id, interaction in dict(*args, **kwargs).items():
            self[interaction_id] = interaction

    def __setitem__(self, interaction_id: str, interaction: InteractionWithTokenLogpReward) -> None:
        self._complete_pending()
        if interaction.model_response is not None:
            interaction.model_response = to_rltap_response(interaction.model_response)
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
                self.complete(interaction_id, to_rltap_response(response), outputs)
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

    def apply_reward_discount(  # type: ignore[override]
        self, turn_discount: float = 1.0
    ) -> dict[str, InteractionWithTokenLogpReward]:
        """Chain-discount the rewards in place, once; returns the complete interactions."""
        if self._discounted:
            msg = "apply_reward_discount should only be called once"
            raise RuntimeError(msg)
        self._complete_pending()
        discounted = super().apply_reward_discount(turn_discount, mode="chain")
        with self._lock:
            for interaction_id, reward in discounted.items():
                self[interaction_id].reward = reward
            self._discounted = True
        return {interaction_id: self[interaction_id] for interaction_id in discounted}

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
            rewards = {node.interaction_id: node.reward or 0.0 for node in complete}
            return export_interactions(complete, rewards, cast(ExportStyle, style), None)
