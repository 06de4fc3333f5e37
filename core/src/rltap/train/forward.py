"""The packed forward pass: every token's logprob in a `TreePack` from one forward of the model.

The model runs once over the whole pack: `input_ids` in depth-first order, `position_ids` = each
token's depth (the position it has in every sequence that contains it), and an attention mask
that lets each token see its ancestors and itself only (`rltap.train.masks`). Each token's
hidden state is then the one it has at the end of any sequence through it, so a token's logprob
is read from its parent's logits: `log_softmax(logits[parent] / T)[token]`, as the engines
record it and as a plain forward over a leaf's whole sequence computes it (equal within 1e-5 in
fp32, `tests/train/test_packed_forward.py`).

A root (a token without a parent) has no context to be predicted from: its logprob is 0.0, the
value every export stores on prompt tokens, so a sum weighted by `loss_mask` stays finite.

`attention` must name the attention the model was loaded with (`attn_implementation=...`);
transformers has no public getter for it, and each takes its own mask:

- `"sdpa"` (transformers' default): the dense 4D bool mask;
- `"eager"`: the same mask in additive form (eager attention adds the mask to its scores);
- `"flex_attention"`: a FlexAttention `BlockMask` built from the intervals, with no `N x N`
  tensor. On CUDA this is the fast path. On CPU (torch 2.13) it runs only without gradients
  (FlexAttention's CPU backend has no backward: `NotImplementedError`), and transformers
  compiles FlexAttention on first use, which takes tens of seconds there. torch 2.13's CPU
  compiler also fails to recompile the kernel for a second pack of another length that spans
  several blocks (`CppCompileError`: "'cur_qSplitSize8' was not declared");
  `torch.compiler.reset()` before such a pack compiles it afresh
  (`bench/packed_forward_exactness.py` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch

from rltap.record.pack import TreePack
from rltap.train.masks import tree_attention_mask, tree_block_mask

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Attention", "packed_logprobs", "packed_token_stats"]

Attention = Literal["sdpa", "eager", "flex_attention"]


def packed_logprobs(
    model: torch.nn.Module,
    pack: TreePack,
    *,
    attention: Attention = "sdpa",
    temperature: float = 1.0,
    block_size: int = 128,
) -> torch.Tensor:
    """The logprob of each of `pack`'s tokens given its ancestors, `[len(pack)]` on the model's
    device (0.0 at a root), from one forward pass of the Hugging Face causal LM `model`: float32
    (float64 for a float64 model, which shows the packing exact to ~1e-12).

    Gradients flow through it when grad mode is on (the training loss is built on it).
    `temperature` divides the logits first, as the engines' recorded logprobs do;
    `block_size` is the FlexAttention block (only for `"flex_attention"`)."""

    device = next(model.parameters()).device
    n = len(pack)
    parents = torch.as_tensor(pack.parent_index, dtype=torch.long, device=device)
    child = torch.nonzero(parents >= 0)[:, 0]
    if len(child) == 0:
        return torch.zeros(n, dtype=torch.float32, device=device)
    logp, row = _token_log_softmax(model, pack, child, attention, temperature, block_size)
    chosen = logp[row, torch.as_tensor(pack.input_ids, device=device)[child]]
    return torch.zeros(n, dtype=chosen.dtype, device=device).index_put((child,), chosen)


def packed_token_stats(
    model: torch.nn.Module,
    pack: TreePack,
    tokens: np.ndarray,
    *,
    attention: Attention = "sdpa",
    temperature: float = 1.0,
    block_size: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The logprob and the entropy of the next-token distribution of each of `tokens` (indices
    into `pack`, each with a parent), from one forward pass: what the training loss needs.

    Logits are computed only where they are read, at the tokens' parents (transformers'
    `logits_to_keep`), so a pack of N tokens costs a `[len(parents), vocab]` logits tensor, not
    `[N, vocab]`: on a 150k vocabulary that is most of the memory of a training forward."""

    device = next(model.parameters()).device
    index = torch.as_tensor(tokens, dtype=torch.long, device=device)
    if bool((torch.as_tensor(pack.parent_index, device=device)[index] < 0).any()):
        msg = "every token needs a parent: a root has no next-token distribution"
        raise ValueError(msg)
    logp, row = _token_log_softmax(model, pack, index, attention, temperature, block_size)
    ids = torch.as_tensor(pack.input_ids, dtype=torch.long, device=device)[index]
    return logp[row, ids], _entropy(logp)[row]


def _entropy(logp: torch.Tensor, rows: int = 64) -> torch.Tensor:
    """-sum(p log p) of each row, without gradient (a metric: the loss does not use it) and a
    few rows at a time: no `[tokens, vocab]` temporaries kept for a backward that never comes
    (two of them, 230 MB each for 384 parents on a 150k vocabulary)."""
    with torch.no_grad():
        parts = [-(part.exp() * part).sum(-1) for part in torch.split(logp.detach(), rows)]
    return torch.cat(parts) if parts else logp.new_zeros(0)


def _token_log_softmax(
    model: torch.nn.Module,
    pack: TreePack,
    tokens: torch.Tensor,
    attention: Attention,
    temperature: float,
    block_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax(logits / T) at each distinct parent of `tokens`, `[parents, vocab]`, and
    each token's row in it (siblings share one: no `[len(tokens), vocab]` copy)."""

    device = tokens.device
    ids = torch.as_tensor(pack.input_ids, dtype=torch.long, device=device)
    positions = torch.as_tensor(pack.position_ids, dtype=torch.long, device=device)
    parents = torch.as_tensor(pack.parent_index, dtype=torch.long, device=device)[tokens]
    keep, row = torch.unique(parents, return_inverse=True)  # siblings share their parent's row
    mask = _attention_mask(model, pack, attention, block_size, device)
    output: Any = model(
        input_ids=ids[None],
        position_ids=positions[None],
        attention_mask=mask,
        use_cache=False,
        logits_to_keep=keep,
    )
    logits = output.logits[0]
    # log_softmax, not logits - logsumexp: the two round apart by ~1e-5 on a 150k vocabulary,
    # and the engines and a plain forward use log_softmax.
    dtype = torch.promote_types(logits.dtype, torch.float32)
    scaled = logits.to(dtype) if temperature == 1.0 else logits.to(dtype) / temperature
    # (dividing by 1 would allocate another [parents, vocab])
    return torch.log_softmax(scaled, dim=-1), row


def _attention_mask(
    model: torch.nn.Module,
    pack: TreePack,
    attention: Attention,
    block_size: int,
    device: torch.device,
) -> Any:
    if attention == "sdpa":
        return tree_attention_mask(pack, device=device)
    if attention == "eager":
        dtype = next(model.parameters()).dtype
        return tree_attention_mask(pack, device=device, dtype=dtype)
    if attention == "flex_attention":
        return tree_block_mask(pack, block_size=block_size, device=device)
    msg = f"attention must be one of 'sdpa', 'eager', 'flex_attention', got {attention!r}"
    raise ValueError(msg)
