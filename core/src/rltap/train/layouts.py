"""Trainer-neutral outputs of a pack: per-leaf values, verl's actor batch, and the file.

- `leaf_values(pack, values)`: a per-token array of the pack (the packed forward's logprobs, the
  trainer's advantages, `pack.rewards`) as one array per leaf, along the leaf's path.
- `verl_batch(pack)`: one row per leaf, as verl's `DataParallelPPOActor` reads a `DataProto`
  batch (`compute_log_prob` selects input_ids, attention_mask, position_ids, responses;
  `update_policy` also response_mask and old_log_probs; the trainer's advantage estimators read
  token_level_rewards). Numpy arrays, shapes [B, P + R] or [B, R], with B the leaves, P the
  longest prompt and R the longest response; wrap them with
  `DataProto.from_dict({k: torch.from_numpy(v) ...})`. A leaf's prompt is its path up to its
  first generated token; its response is the rest (later turns' prompt tokens included, masked
  out by response_mask, as verl's multi-turn rollouts lay them out). Key by key:
  - `input_ids` int64 [B, P + R]: the prompt left-padded to P, then the response right-padded
    to R (with `pad_token_id`), so every response starts at column P and the actor's
    `logits[:, -R - 1:-1]` predict exactly `responses`;
  - `attention_mask` int64 [B, P + R]: 1 on real tokens, 0 on padding;
  - `position_ids` int64 [B, P + R]: `clip(cumsum(attention_mask) - 1, 0)`, verl's own rule,
    which on real tokens is the token's depth in the pack (its `position_ids`);
  - `responses` int64 [B, R]: `input_ids[:, P:]`;
  - `response_mask` int64 [B, R]: the loss mask over the response: 1 on generated tokens, 0 on
    a later turn's prompt tokens and on padding;
  - `old_log_probs` float32 [B, R]: the recorded logprobs (or the per-token `logprobs` given,
    e.g. the packed forward's) on generated tokens, 0 elsewhere;
  - `token_level_rewards` float32 [B, R]: the leaf's reward on its last generated token, 0
    elsewhere, where verl's reward managers put a sequence's score.
  A generated token shared by several leaves (an earlier turn under a branch) is in each of
  their rows, as in the `concat` export.
- The file: micro-batches are packs, so `rltap.record.pack_io.save_packs(path, micro_batches)`
  writes them into one `batch.safetensors` (its module docstring lists the keys; `pack_offsets`
  bounds each micro-batch) and `load_packs` reads them back.
"""

from __future__ import annotations

import numpy as np

from rltap.record.pack import TreePack

__all__ = ["VERL_KEYS", "leaf_values", "verl_batch"]

VERL_KEYS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "responses",
    "response_mask",
    "old_log_probs",
    "token_level_rewards",
)


def leaf_values(pack: TreePack, values: np.ndarray) -> list[np.ndarray]:
    """Per-token `values` ([len(pack)], or [len(pack), ...]) as one array per leaf of `pack`,
    in `pack.leaves` order, each along the leaf's path (root first)."""
    if len(values) != len(pack):
        msg = f"values has {len(values)} entries; the pack has {len(pack)} tokens"
        raise ValueError(msg)
    return [values[leaf.path] for leaf in pack.leaves]


def verl_batch(
    pack: TreePack, *, pad_token_id: int = 0, logprobs: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """verl's actor batch of `pack`, one row per leaf (keys and conventions in the module)."""
    recorded = pack.logprobs if logprobs is None else np.asarray(logprobs, dtype=np.float32)
    ids, losses, logps = (leaf_values(pack, v) for v in (pack.input_ids, pack.loss_mask, recorded))
    starts = [int(np.argmax(loss)) if loss.any() else len(loss) for loss in losses]
    prompt_len = max(starts, default=0)
    response_len = max(
        (len(row) - start for row, start in zip(ids, starts, strict=True)), default=0
    )
    rows = len(pack.leaves)
    input_ids = np.full((rows, prompt_len + response_len), pad_token_id, dtype=np.int64)
    attention = np.zeros((rows, prompt_len + response_len), dtype=np.int64)
    response_mask = np.zeros((rows, response_len), dtype=np.int64)
    old_log_probs = np.zeros((rows, response_len), dtype=np.float32)
    rewards = np.zeros((rows, response_len), dtype=np.float32)
    for row, (leaf, start) in enumerate(zip(pack.leaves, starts, strict=True)):
        length = len(ids[row]) - start
        columns = slice(prompt_len - start, prompt_len + length)
        input_ids[row, columns] = ids[row]
        attention[row, columns] = 1
        response_mask[row, :length] = losses[row][start:]
        old_log_probs[row, :length] = np.where(losses[row][start:] > 0, logps[row][start:], 0.0)
        generated = np.flatnonzero(losses[row][start:])
        if len(generated):
            rewards[row, generated[-1]] = leaf.reward
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "position_ids": np.clip(np.cumsum(attention, axis=1) - 1, 0, None),
        "responses": input_ids[:, prompt_len:].copy(),
        "response_mask": response_mask,
        "old_log_probs": old_log_probs,
        "token_level_rewards": rewards,
    }
