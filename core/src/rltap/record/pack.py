"""Tree packing: the interactions of a session (or of a group sharing a prompt) as one token trie.

Multi-turn branches share long token prefixes; packed into a trie each shared token appears once.
The pack is laid out in depth-first order, so a token's ancestors come before it and its
descendants right after it:

- `input_ids[i]`: the token; `position_ids[i]`: its depth (0 at a root), the position it had in
  every sequence that contains it;
- `parent_index[i]`: the token before it (-1 at a root); `subtree_end[i]`: one past its last
  descendant. Token i sees token j (an ancestor, or itself) iff `j <= i < subtree_end[j]`: the
  DFS enter/exit interval test the packed attention mask is built from;
- `loss_mask`, `logprobs`, `versions`: as in every export (1, the recorded logprob and the policy
  version on generated tokens; 0, 0.0 and -1 on prompt tokens);
- `interaction_index[i]`: which of `interaction_ids` generated the token (-1 for a prompt token);
  `rewards[i]`: that interaction's discounted reward (0 on prompt tokens); `advantages[i]`: a slot
  for the trainer (zeros);
- `leaves`: one per interaction that no call continues by a `prefix` link (the `concat` style's
  sequences): its id, its reward and its `path`, the indices of its whole sequence in the pack.

Which tokens are one: prompt tokens merge by content (the same token after the same tokens is
the same computation, whoever sent it), so a group's shared prompt and `n > 1` siblings' prompt
appear once. A generated token merges only with itself: a `prefix` child's prompt continues from
its parent's last token, reusing the parent's generated tokens, while two samples that happen to
generate the same tokens keep their own branches (each carries its own logprobs, versions and
reward). A child by a `rewrite`, `handoff`, `subagent` or `carry` link renders its own full prompt,
so it shares only the prompt tokens it has in common, then branches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rltap.record.errors import ExportMismatch
from rltap.record.types import InteractionWithTokenLogpReward

__all__ = ["PackLeaf", "TreePack", "merge_tries", "pack_interactions"]

_PROMPT = -1  # the origin of a prompt token


@dataclass(frozen=True, slots=True)
class PackLeaf:
    """One sequence of the pack: the interaction it ends in, its reward, its token indices."""

    interaction_id: str
    reward: float
    path: np.ndarray  # int32 indices into the pack, root first


@dataclass(slots=True)
class TreePack:
    """A token trie in depth-first order (see the module for each array)."""

    input_ids: np.ndarray
    position_ids: np.ndarray
    parent_index: np.ndarray
    subtree_end: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    versions: np.ndarray
    interaction_index: np.ndarray
    rewards: np.ndarray
    advantages: np.ndarray
    interaction_ids: list[str]
    leaves: list[PackLeaf] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    def sees(self, i: int, j: int) -> bool:
        """Whether token i attends to token j (j is i or one of its ancestors)."""
        return bool(j <= i < self.subtree_end[j])

    def path_to(self, index: int) -> np.ndarray:
        """The indices from a root down to token `index` (int32), its whole sequence."""
        path = []
        while index >= 0:
            path.append(index)
            index = int(self.parent_index[index])
        return np.array(path[::-1], dtype=np.int32)

    def leaf_sequence(self, leaf: PackLeaf) -> np.ndarray:
        sequence: np.ndarray = self.input_ids[leaf.path]
        return sequence


class _Node:
    __slots__ = ("children", "logprob", "origin", "token", "version")

    def __init__(self, token: int, origin: int, logprob: float, version: int) -> None:
        self.token, self.origin, self.logprob, self.version = token, origin, logprob, version
        self.children: dict[tuple[int, int], _Node] = {}


def _child(node: _Node, token: int, origin: int, logprob: float, version: int) -> _Node:
    key = (token, origin)
    found = node.children.get(key)
    if found is None:
        found = node.children[key] = _Node(token, origin, logprob, version)
    return found


def pack_interactions(
    interactions: Sequence[InteractionWithTokenLogpReward], rewards: Mapping[str, float]
) -> TreePack:
    """Pack the complete `interactions` (of one session or one group, in insertion order) with
    their discounted `rewards` into one trie; a `prefix` child must continue its parent's tokens
    (else `ExportMismatch`, as the `concat` export)."""
    complete = [i for i in interactions if i.is_complete and i.model_response is not None]
    root = _Node(-1, _PROMPT, 0.0, -1)
    ends: dict[str, tuple[_Node, int]] = {}  # an interaction's last trie node, and its depth
    continued = set()
    for origin, node in enumerate(complete):
        response = node.model_response
        assert response is not None
        at, depth = root, 0
        prompt = response.input_tokens
        parent = node.token_parent
        if parent is not None and parent.interaction_id in ends:
            at, depth = ends[parent.interaction_id]
            _check_continues(node, parent)
            prompt = prompt[depth:]
            continued.add(parent.interaction_id)
        for token in prompt:
            at = _child(at, token, _PROMPT, 0.0, -1)
        generated = (response.output_tokens, response.output_logprobs, response.output_versions)
        for token, logprob, version in zip(*generated, strict=True):
            at = _child(at, token, origin, logprob, version)
        ends[node.interaction_id] = (at, depth + len(prompt) + response.output_len)
    pack, position = _flatten(root, [node.interaction_id for node in complete], rewards)
    for node in complete:
        if node.interaction_id not in continued:
            last = position[id(ends[node.interaction_id][0])]
            reward = float(rewards.get(node.interaction_id, 0.0))
            pack.leaves.append(PackLeaf(node.interaction_id, reward, pack.path_to(last)))
    return pack


def merge_tries(packs: Sequence[TreePack]) -> TreePack:
    """One pack of several (a group's episodes, each packed on its own): tokens merge by the
    rules of `pack_interactions`, so the prompt the episodes share appears once while each
    interaction keeps its own generated tokens. Interaction ids must be unique across `packs`."""
    root = _Node(-1, _PROMPT, 0.0, -1)
    interaction_ids: list[str] = []
    rewards: dict[str, float] = {}
    ends: list[tuple[PackLeaf, _Node]] = []
    for pack in packs:
        offset = len(interaction_ids)
        interaction_ids.extend(pack.interaction_ids)
        nodes: list[_Node] = []  # the merged trie's node of each of this pack's tokens
        for index, (token, above, made_by) in enumerate(
            zip(pack.input_ids, pack.parent_index, pack.interaction_index, strict=True)
        ):
            at = root if above < 0 else nodes[above]  # depth-first: a parent comes first
            origin = _PROMPT if made_by < 0 else int(made_by) + offset
            logprob, version = float(pack.logprobs[index]), int(pack.versions[index])
            nodes.append(_child(at, int(token), origin, logprob, version))
            if made_by >= 0:
                rewards[pack.interaction_ids[made_by]] = float(pack.rewards[index])
        ends.extend((leaf, nodes[int(leaf.path[-1])]) for leaf in pack.leaves)
        # An interaction without generated tokens has its reward on its leaf only.
        rewards.update((leaf.interaction_id, leaf.reward) for leaf in pack.leaves)
    if len(set(interaction_ids)) != len(interaction_ids):
        msg = "the packs to merge share an interaction id; each interaction belongs to one pack"
        raise ValueError(msg)
    merged, position = _flatten(root, interaction_ids, rewards)
    for leaf, node in ends:
        path = merged.path_to(position[id(node)])
        merged.leaves.append(PackLeaf(leaf.interaction_id, leaf.reward, path))
    return merged


def _check_continues(
    node: InteractionWithTokenLogpReward, parent: InteractionWithTokenLogpReward
) -> None:
    child, above = node.model_response, parent.model_response
    assert child is not None
    assert above is not None
    expected = above.input_tokens + above.output_tokens
    if child.input_tokens[: len(expected)] != expected:
        msg = (
            f"interaction {node.interaction_id} does not continue its parent "
            f"{parent.interaction_id}'s {len(expected)} tokens; use chat template mode 'concat'"
        )
        raise ExportMismatch(msg)


def _flatten(
    root: _Node, interaction_ids: list[str], rewards: Mapping[str, float]
) -> tuple[TreePack, dict[int, int]]:
    """Depth-first order, iteratively (a 10k-token chain is 10k levels deep); also each node's
    index in the pack, by `id(node)`."""
    tokens: list[_Node] = []
    depth: list[int] = []
    parent: list[int] = []
    end: list[int] = []
    stack: list[tuple[_Node, int, int]] = [
        (child, 0, -1) for child in reversed(root.children.values())
    ]
    open_: list[int] = []  # indices whose subtree is being laid out, deepest last
    while stack:
        node, level, above = stack.pop()
        while open_ and depth[open_[-1]] >= level:
            end[open_.pop()] = len(tokens)
        index = len(tokens)
        tokens.append(node)
        depth.append(level)
        parent.append(above)
        end.append(0)
        open_.append(index)
        stack.extend((child, level + 1, index) for child in reversed(node.children.values()))
    for index in open_:
        end[index] = len(tokens)
    origin = np.array([node.origin for node in tokens], dtype=np.int32)
    reward_of = np.array([rewards.get(i, 0.0) for i in interaction_ids] + [0.0], dtype=np.float32)
    pack = TreePack(
        input_ids=np.array([node.token for node in tokens], dtype=np.int32),
        position_ids=np.array(depth, dtype=np.int32),
        parent_index=np.array(parent, dtype=np.int32),
        subtree_end=np.array(end, dtype=np.int32),
        loss_mask=(origin != _PROMPT).astype(np.int32),
        logprobs=np.array([node.logprob for node in tokens], dtype=np.float32),
        versions=np.array([node.version for node in tokens], dtype=np.int32),
        interaction_index=origin,
        rewards=np.where(origin != _PROMPT, reward_of[origin], 0.0).astype(np.float32),
        advantages=np.zeros(len(tokens), dtype=np.float32),
        interaction_ids=interaction_ids,
    )
    return pack, {id(node): index for index, node in enumerate(tokens)}
