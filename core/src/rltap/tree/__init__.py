"""The conversation tree of one session: its calls, how they link, their rewards, their export.

    canonical  the form in which messages are compared (`content: null` == `""`, ...)
    carry      the evidence that a call carries an earlier reply in another form
    links      the rules that choose a call's parent and link kind
    cache      InteractionCache: one session's calls, linked into a tree as they arrive
    rewards    discounting backwards along the tree (or along insertion order), per episode or agent
    reward_targets  where a dict of rewards goes: by interaction id, or by agent
    export     training data out of a tree: `individual`, `concat`, the padded batch

Pure Python over `rltap.record`: no engine, no HTTP, no torch.
"""

from __future__ import annotations

from rltap.tree.cache import CacheJournal, InteractionCache
from rltap.tree.export import (
    ExportStyle,
    concat_padded_tensors,
    export_interactions,
    export_tree,
    padded_batch,
)
from rltap.tree.links import choose_link
from rltap.tree.rewards import (
    Aggregate,
    DiscountMode,
    LinkFactors,
    discount_along_tree,
    discount_chain,
    discount_rewards,
)

__all__ = [
    "Aggregate",
    "CacheJournal",
    "DiscountMode",
    "ExportStyle",
    "InteractionCache",
    "LinkFactors",
    "choose_link",
    "concat_padded_tensors",
    "discount_along_tree",
    "discount_chain",
    "discount_rewards",
    "export_interactions",
    "export_tree",
    "padded_batch",
]
