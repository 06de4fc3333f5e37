"""Training data out of a conversation tree: export styles and batching.

- `individual`: every complete interaction is one sequence (its prompt, then its output).
- `concat`: one sequence per interaction that no call continues by a `prefix` link, holding its
  branch up to the nearest link of another kind (`rltap.tree.links`): the first call's prompt and
  output, then each descendant's new prompt tokens and output, with the loss mask on every
  generated segment. A child by a `rewrite`, `handoff`, `subagent` or `carry` link starts a new
  sequence with its own full prompt (its tokens do not continue the parent's); its `parent_id` and
  `link` say where it hangs in the tree. Along a prefix link, each child's prompt must start with
  its parent's full token sequence; a break raises `ExportMismatch` naming both interactions, it is
  never masked.

- `tree`: the interactions packed into one token trie, shared prefixes once (`rltap.record.pack`:
  its layout, and which tokens merge). It is one object, not one per interaction, so it has its own
  calls: `export_tree` here, `InteractionCache.export_tree`, `DirectOpenAI.export_tree`,
  `OpenAIProxyClient.export_tree` (all return a `TreePack`); `export_interactions` refuses it with
  a 400 naming them. Where an export is a body, style "tree" is what asks for it:
  `/export_trajectories` (the pack's arrays in the rltap tensor envelope, its leaves and every
  interaction's metadata, `rltap.proxy.control`), `OpenAIProxyWorkflow(style="tree")` (a pack per
  episode; a group's packs merged into one) and `rltap rollout --style tree`.

`agents` keeps only the interactions (for `concat`, the sequences) of those agents; rewards are
discounted over the whole tree first, so a kept call still gets the credit of the others.

In-flight, failed and aborted interactions are never training data.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rltap.record.errors import ExportMismatch, InvalidRequest
from rltap.record.exported import TOKEN_COLUMNS, ExportStyle
from rltap.record.pack import TreePack, pack_interactions
from rltap.record.types import InteractionWithTokenLogpReward, TokenSequence

if TYPE_CHECKING:
    import torch

__all__ = [
    "ExportStyle",
    "branch_sequence",
    "concat_leaves",
    "concat_padded_tensors",
    "export_interactions",
    "export_tree",
    "padded_batch",
]


# Padding value of each tensor key; keys not listed pad with 0.
_PAD_VALUES: dict[str, int | float | bool] = {"versions": -1, "attention_mask": False}


def _full_tokens(node: InteractionWithTokenLogpReward) -> list[int]:
    assert node.model_response is not None
    return node.model_response.input_tokens + node.model_response.output_tokens


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return min(len(a), len(b))


def branch_sequence(leaf: InteractionWithTokenLogpReward) -> TokenSequence:
    """The branch ending in `leaf`, along its prefix links, as one sequence, verified token by
    token."""
    branch = [leaf]
    while (above := branch[-1].token_parent) is not None:
        branch.append(above)
    branch.reverse()
    sequence = TokenSequence()
    parent: InteractionWithTokenLogpReward | None = None
    for node in branch:
        response = node.model_response
        if response is None or not node.is_complete:
            msg = (
                f"interaction {node.interaction_id} on the branch of {leaf.interaction_id} "
                f"is {node.status}"
            )
            raise ExportMismatch(msg)
        prompt = response.input_tokens
        start = 0
        if parent is not None:
            expected = _full_tokens(parent)
            if prompt[: len(expected)] != expected:
                at = _first_difference(prompt, expected)
                msg = (
                    f"interaction {node.interaction_id} does not continue its parent "
                    f"{parent.interaction_id}: its prompt differs from the parent's "
                    f"{len(expected)} tokens at position {at}; use chat template mode 'concat' "
                    "or export style 'individual'"
                )
                raise ExportMismatch(msg)
            start = len(expected)
        sequence.append_prompt(prompt[start:])
        sequence.append_output(response)
        parent = node
    return sequence


def export_interactions(
    nodes: Sequence[InteractionWithTokenLogpReward],
    rewards: Mapping[str, float],
    style: ExportStyle = "individual",
    agents: Collection[str] | None = None,
) -> dict[str, InteractionWithTokenLogpReward]:
    """Export copies of the complete `nodes` (insertion order) carrying their discounted reward.

    The copies' `to_tensor_dict()` gives the training tensors: for `concat`, the branch.
    """
    complete = _exportable(nodes, agents)
    if style == "individual":
        return {
            node.interaction_id: node.copy_for_export(reward=rewards[node.interaction_id])
            for node in complete
        }
    if style == "concat":
        return {
            node.interaction_id: node.copy_for_export(
                reward=rewards[node.interaction_id], sequence=branch_sequence(node)
            )
            for node in concat_leaves(complete)
        }
    if style == "tree":
        msg = "style 'tree' exports one TreePack, not interactions: call export_tree"
        raise InvalidRequest(msg, param="style")
    msg = f"style must be 'individual', 'concat' or 'tree', got {style!r}"
    raise InvalidRequest(msg, param="style")


def export_tree(
    nodes: Sequence[InteractionWithTokenLogpReward],
    rewards: Mapping[str, float],
    agents: Collection[str] | None = None,
) -> TreePack:
    """The complete `nodes` (of those `agents`) with their discounted rewards in one token trie.

    A kept call whose prefix parent is left out starts from its own full prompt.
    """
    return pack_interactions(_exportable(nodes, agents), rewards)


def concat_leaves(
    nodes: Sequence[InteractionWithTokenLogpReward],
) -> list[InteractionWithTokenLogpReward]:
    """The `nodes` whose tokens no other of them continues: the ends of the concat branches."""
    continued = {
        parent.interaction_id for node in nodes if (parent := node.token_parent) is not None
    }
    return [node for node in nodes if node.interaction_id not in continued]


def _exportable(
    nodes: Sequence[InteractionWithTokenLogpReward], agents: Collection[str] | None
) -> list[InteractionWithTokenLogpReward]:
    complete = [node for node in nodes if node.is_complete and node.model_response is not None]
    if agents is not None:
        wanted = set(agents)
        complete = [node for node in complete if node.agent_id in wanted]
    return complete


def concat_padded_tensors(
    tensor_dicts: Sequence[Mapping[str, torch.Tensor]], pad_token_id: int = 0
) -> dict[str, torch.Tensor]:
    """Right-pad tensor dicts ([B, L] per key, rewards [B]) to the longest and stack on the batch.

    Padding: input_ids with `pad_token_id`, versions with -1, attention_mask with False, the rest
    with 0.
    """
    import torch

    if not tensor_dicts:
        return {}
    keys = list(tensor_dicts[0])
    for index, tensors in enumerate(tensor_dicts):
        if list(tensors) != keys:
            msg = f"tensor dict {index} has keys {sorted(tensors)}, expected {sorted(keys)}"
            raise ValueError(msg)
    length = max(t.shape[1] for d in tensor_dicts for t in d.values() if t.dim() == 2)
    merged: dict[str, torch.Tensor] = {}
    for key in keys:
        parts = [d[key] for d in tensor_dicts]
        if parts[0].dim() < 2:
            merged[key] = torch.cat(parts)
            continue
        pad = pad_token_id if key == "input_ids" else _PAD_VALUES.get(key, 0)
        padded = []
        for part in parts:
            if part.shape[1] < length:
                fill = torch.full((part.shape[0], length - part.shape[1]), pad, dtype=part.dtype)
                part = torch.cat([part, fill], dim=1)
            padded.append(part)
        merged[key] = torch.cat(padded)
    return merged


def padded_batch(
    rows: Iterable[Mapping[str, Any]], pad_token_id: int = 0
) -> dict[str, torch.Tensor]:
    """Exported rows (`rltap rollout`'s trajectory lines, `rltap export`'s rows: their token
    columns and reward) as one right-padded batch; empty for no rows."""
    tensors = []
    for row in rows:
        sequence = TokenSequence(**{name: row[name] for name, _ in TOKEN_COLUMNS})
        tensors.append(sequence.to_tensor_dict(float(row["reward"] or 0.0)))
    return concat_padded_tensors(tensors, pad_token_id=pad_token_id)
