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

`TokenScorer(model)` is that forward as one module: the model's decoder over the pack, then its
output layer at the tokens' parents only, `chunk_rows` parents at a time. Each chunk's logits,
log_softmax and chosen-token gather run under `torch.utils.checkpoint` (non-reentrant), so only
the chunk's `[rows]` results are kept for the backward, which recomputes the chunk's logits: a
micro-batch never holds a `[parents, vocab]` tensor for its backward (the log_softmax's output,
600 kB per parent in fp32 on a 150k vocabulary: most of the memory a training forward keeps; a
1023-token pack of the tiny model keeps 21.6 MiB instead of 614). The entropy, a metric, is
computed per chunk without gradient. The scorer is what `rltap.train.distributed.shard_model`
shards as FSDP2's root, so that its forward's hooks gather and reduce every parameter, the
output layer's included.

The scorer computes `output_layer(decoder(...))`, which is transformers' causal LMs' own forward
for the Llama, Qwen and Mistral families; a model whose causal-LM head also rescales or caps
the logits (a config's `final_logit_softcapping`, `logit_scale`, `logits_scaling`) is refused.

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

import functools
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch.utils.checkpoint import checkpoint

from rltap.engines.lora import is_peft_model
from rltap.record.errors import RltapError
from rltap.record.pack import TreePack
from rltap.train.masks import tree_attention_mask, tree_block_mask

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Attention", "TokenScorer", "packed_logprobs", "packed_token_stats"]

Attention = Literal["sdpa", "eager", "flex_attention"]

# Parents per chunk of the output layer: 256 x a 150k vocabulary is 155 MB of fp32 logits.
CHUNK_ROWS = 256

# Config fields of causal LMs whose head transforms the logits after the output layer.
_LOGIT_TRANSFORMS = {"final_logit_softcapping": None, "logit_scale": None, "logits_scaling": 1.0}


class TokenScorer(torch.nn.Module):
    """The packed forward of a Hugging Face causal LM `model` (or a peft model of one) as a
    module: `forward` returns the logprob of each chosen token and the entropy of its
    next-token distribution, the output layer computed `chunk_rows` parents at a time.

    `model` stays the module holding the weights (the scorer's only child: its state dict is
    the model's under `model.`). `device` is where the inputs go: the model's device when the
    scorer is built (parameters offloaded to the CPU later still compute there).

    Usage:
        scorer = TokenScorer(model)
        logp, entropy = packed_token_stats(scorer, pack, tokens)
    """

    def __init__(self, model: torch.nn.Module, *, chunk_rows: int = CHUNK_ROWS) -> None:
        super().__init__()
        self.model = model
        self.chunk_rows = chunk_rows
        parameter = next(model.parameters())
        self.device = parameter.device
        self.dtype = parameter.dtype
        config = getattr(self._base(), "config", None)
        for name, identity in _LOGIT_TRANSFORMS.items():
            value = getattr(config, name, None)
            if value is not None and value != identity:
                msg = (
                    f"{type(self._base()).__name__} transforms its logits ({name}={value}): "
                    "the trainer's packed forward computes the output layer's logits only"
                )
                raise RltapError(msg)
        if self._base().get_output_embeddings() is None:
            msg = f"{type(self._base()).__name__} has no output layer (get_output_embeddings)"
            raise RltapError(msg)

    def _base(self) -> Any:
        """The transformers model: `model`, or a peft model's base model (with its adapter's
        layers injected, so the adapter takes part)."""
        model: Any = self.model
        return model.get_base_model() if is_peft_model(model) else model

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: Any,
        parents: torch.Tensor,
        rows: torch.Tensor,
        targets: torch.Tensor,
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The logprob of `targets[i]` after the distribution at `parents[rows[i]]`, and that
        distribution's entropy (without gradient), `[len(targets)]` each; `input_ids` and
        `position_ids` are `[1, N]`, `parents` distinct positions in them."""
        base = self._base()
        output = base.get_decoder()(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=attention_mask,
            use_cache=False,
        )
        hidden = output.last_hidden_state[0, parents]
        return _chunked_head(
            base.get_output_embeddings(), hidden, rows, targets, temperature, self.chunk_rows
        )


def _chunked_head(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    rows: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    chunk_rows: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`_score_chunk` over `chunk_rows` rows of `hidden` at a time, each chunk's tokens (those
    whose row is in it) gathered together: sorted by row, each chunk's are a slice."""
    if len(hidden) == 0:
        empty = hidden.new_zeros(0, dtype=torch.promote_types(hidden.dtype, torch.float32))
        return empty, empty
    order = torch.argsort(rows, stable=True)
    sorted_rows = rows[order]
    starts = list(range(0, len(hidden), chunk_rows))
    bounds = torch.tensor([*starts, len(hidden)], device=rows.device)
    edges = torch.searchsorted(sorted_rows, bounds).tolist()
    score = functools.partial(_score_chunk, head, temperature)
    chosen, entropies = [], []
    for i, start in enumerate(starts):
        part = slice(edges[i], edges[i + 1])
        args = (hidden[start : start + chunk_rows], sorted_rows[part] - start, targets[order[part]])
        if torch.is_grad_enabled():
            logp, entropy = checkpoint(score, *args, use_reentrant=False)
        else:
            logp, entropy = score(*args)
        chosen.append(logp)
        entropies.append(entropy)
    inverse = torch.argsort(order)
    return torch.cat(chosen)[inverse], torch.cat(entropies)[rows]


def _score_chunk(
    head: torch.nn.Module,
    temperature: float,
    hidden: torch.Tensor,
    rows: torch.Tensor,
    targets: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax(head(hidden) / T)[rows, targets] and each row's entropy (no gradient)."""
    logits = head(hidden)
    # at least fp32: a bf16 log_softmax over a 150k vocabulary loses the logprobs' digits
    dtype = torch.promote_types(logits.dtype, torch.float32)
    # (dividing by 1 would allocate another [rows, vocab])
    scaled = logits.to(dtype) if temperature == 1.0 else logits.to(dtype) / temperature
    # log_softmax, not logits - logsumexp: the two round apart by ~1e-5 on a 150k vocabulary,
    # and the engines and a plain forward use log_softmax.
    logp = torch.log_softmax(scaled, dim=-1)
    with torch.no_grad():
        entropy = -(logp.exp() * logp).sum(-1)
    return logp[rows, targets], entropy


def scorer_of(model: torch.nn.Module) -> TokenScorer:
    """`model` if it is a `TokenScorer` (a sharded one too), else a new one on it."""
    return model if isinstance(model, TokenScorer) else TokenScorer(model)


def packed_logprobs(
    model: torch.nn.Module,
    pack: TreePack,
    *,
    attention: Attention = "sdpa",
    temperature: float = 1.0,
    block_size: int = 128,
) -> torch.Tensor:
    """The logprob of each of `pack`'s tokens given its ancestors, `[len(pack)]` on the model's
    device (0.0 at a root), from one forward pass of the Hugging Face causal LM `model` (or its
    `TokenScorer`): float32 (float64 for a float64 model, which shows the packing exact to
    ~1e-12).

    Gradients flow through it when grad mode is on (the training loss is built on it).
    `temperature` divides the logits first, as the engines' recorded logprobs do;
    `block_size` is the FlexAttention block (only for `"flex_attention"`)."""

    scorer = scorer_of(model)
    parents = torch.as_tensor(pack.parent_index, dtype=torch.long)
    child = torch.nonzero(parents >= 0)[:, 0]
    n = len(pack)
    if len(child) == 0:
        return torch.zeros(n, dtype=torch.float32, device=scorer.device)
    chosen, _ = _score(scorer, pack, child, attention, temperature, block_size)
    index = child.to(chosen.device)
    return torch.zeros(n, dtype=chosen.dtype, device=chosen.device).index_put((index,), chosen)


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
    into `pack`, each with a parent), from one forward pass of `model` (a causal LM or its
    `TokenScorer`): what the training loss needs.

    Logits are computed only where they are read, at the tokens' distinct parents, a chunk of
    them at a time (`TokenScorer`): a pack of N tokens never holds `[N, vocab]` logits, and its
    backward keeps no `[parents, vocab]` tensor."""

    index = torch.as_tensor(tokens, dtype=torch.long)
    if bool((torch.as_tensor(pack.parent_index)[index] < 0).any()):
        msg = "every token needs a parent: a root has no next-token distribution"
        raise ValueError(msg)
    return _score(scorer_of(model), pack, index, attention, temperature, block_size)


def _score(
    scorer: TokenScorer,
    pack: TreePack,
    tokens: torch.Tensor,
    attention: Attention,
    temperature: float,
    block_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`scorer` over `pack`, at `tokens` (each with a parent; on the CPU)."""
    device = scorer.device
    ids = torch.as_tensor(pack.input_ids, dtype=torch.long)
    positions = torch.as_tensor(pack.position_ids, dtype=torch.long)
    parents = torch.as_tensor(pack.parent_index, dtype=torch.long)[tokens]
    keep, rows = torch.unique(parents, return_inverse=True)  # siblings share their parent's row
    mask = _attention_mask(scorer.dtype, pack, attention, block_size, device)
    return scorer(  # type: ignore[no-any-return]
        ids[None].to(device),
        positions[None].to(device),
        mask,
        keep.to(device),
        rows.to(device),
        ids[tokens].to(device),
        temperature,
    )


def _attention_mask(
    dtype: torch.dtype,
    pack: TreePack,
    attention: Attention,
    block_size: int,
    device: torch.device,
) -> Any:
    if attention == "sdpa":
        return tree_attention_mask(pack, device=device)
    if attention == "eager":
        return tree_attention_mask(pack, device=device, dtype=dtype)
    if attention == "flex_attention":
        return tree_block_mask(pack, block_size=block_size, device=device)
    msg = f"attention must be one of 'sdpa', 'eager', 'flex_attention', got {attention!r}"
    raise ValueError(msg)
