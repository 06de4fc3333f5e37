"""The packed forward pass (rltap.train.forward) and its masks (rltap.train.masks): one forward
over a tree pack gives every token the logprob a plain forward over its leaf's whole sequence
gives it (fp32, within 1e-5), with SDPA's bool mask and eager's additive one; the FlexAttention
BlockMask built from the intervals is, block for block, the one torch builds from the dense test
and, token for token, the ancestor mask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from rltap.record.pack import TreePack
from rltap.record.types import InteractionWithTokenLogpReward, Link
from rltap.testing.packs import SAMPLE_PACKS, mixed_pack, pack_calls, plain_leaf_logprobs
from rltap.testing.packs import recorded_call as call
from rltap.train import packed_logprobs, tree_attention_mask, tree_block_mask, tree_mask_mod
from rltap.train.forward import TokenScorer, packed_token_stats
from rltap.train.layouts import leaf_values

TOLERANCE = 1e-5  # fp32, DESIGN.md's token-fidelity bound


def max_gap_to_leaves(
    model: Any, pack: TreePack, values: torch.Tensor, temperature: float = 1.0
) -> float:
    """The largest gap between the packed logprobs, unpacked along each leaf, and a plain
    forward over that leaf's sequence; every token lies on some leaf, so all are compared."""
    assert sorted({int(i) for leaf in pack.leaves for i in leaf.path}) == list(range(len(pack)))
    unpacked = leaf_values(pack, values.detach().numpy())
    expected = plain_leaf_logprobs(model, pack, temperature=temperature)
    assert [len(u) for u in unpacked] == [len(e) for e in expected]
    return max(float(np.abs(u - e).max()) for u, e in zip(unpacked, expected, strict=True))


@pytest.fixture(scope="module")
def eager_model(tiny_model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    path = str(tiny_model_dir)
    return AutoModelForCausalLM.from_pretrained(
        path, dtype="float32", attn_implementation="eager"
    ).eval()


@pytest.mark.parametrize(
    ("build", "temperature"),
    [
        *(pytest.param(build, 1.0, id=name) for name, build in SAMPLE_PACKS.items()),
        pytest.param(mixed_pack, 0.7, id="mixed-temperature"),
    ],
)
def test_one_packed_sdpa_forward_gives_each_leafs_plain_logprobs(
    tiny_model: Any, build: Any, temperature: float
) -> None:
    pack = build()
    with torch.no_grad():
        values = packed_logprobs(tiny_model, pack, temperature=temperature)
    assert values.dtype == torch.float32
    assert values.shape == (len(pack),)
    assert max_gap_to_leaves(tiny_model, pack, values, temperature) <= TOLERANCE


def test_the_eager_attention_path_takes_the_additive_mask(eager_model: Any) -> None:
    pack = mixed_pack()
    with torch.no_grad():
        values = packed_logprobs(eager_model, pack, attention="eager")
    assert max_gap_to_leaves(eager_model, pack, values) <= TOLERANCE


def test_gradients_flow_through_the_packed_logprobs(tiny_model: Any) -> None:
    values = packed_logprobs(tiny_model, SAMPLE_PACKS["chain"]())
    assert values.requires_grad
    (grad,) = torch.autograd.grad(values.sum(), tiny_model.lm_head.weight)
    assert float(grad.abs().sum()) > 0.0


def test_an_unknown_attention_is_refused(tiny_model: Any) -> None:
    with pytest.raises(ValueError, match="flash"):
        packed_logprobs(tiny_model, mixed_pack(), attention="flash")  # type: ignore[arg-type]


@st.composite
def sessions(draw: st.DrawFn) -> list[InteractionWithTokenLogpReward]:
    """Calls over a 4-token vocabulary (prompts merge often): roots, prefix continuations,
    rewrites, n > 1 samples."""
    tokens = st.lists(st.integers(100, 103), min_size=1, max_size=4)
    made: list[InteractionWithTokenLogpReward] = []
    for _ in range(draw(st.integers(1, 6))):
        parent = draw(st.sampled_from([None, *made]))
        link = draw(st.sampled_from([Link.PREFIX, Link.PREFIX, Link.REWRITE]))
        new = draw(tokens)
        made.extend(call(new, draw(tokens), parent, link) for _ in range(draw(st.integers(1, 2))))
    return made


@settings(max_examples=15, deadline=None)
@given(nodes=sessions())
def test_random_trees_unpack_to_each_leafs_plain_logprobs(
    tiny_model: Any, nodes: list[InteractionWithTokenLogpReward]
) -> None:
    pack = pack_calls(nodes)
    with torch.no_grad():
        values = packed_logprobs(tiny_model, pack)
    assert max_gap_to_leaves(tiny_model, pack, values) <= TOLERANCE


def block_table(counts: torch.Tensor | None, indices: torch.Tensor | None) -> torch.Tensor:
    """A BlockMask's listed (query block, key block) pairs as a `[blocks, blocks]` bool table."""
    assert counts is not None
    assert indices is not None
    table = torch.zeros(indices.shape[-2:], dtype=torch.bool)
    for row, count in enumerate(counts[0, 0].tolist()):
        table[row, indices[0, 0, row, :count].long()] = True
    return table


def token_mask(block_mask: BlockMask, n: int) -> torch.Tensor:
    """What a FlexAttention kernel computes with `block_mask`: only the listed block pairs, with
    the `mask_mod` on the partial ones and every token pair on the full ones."""
    size = block_mask.BLOCK_SIZE[0]
    q, kv = torch.arange(n)[:, None], torch.arange(n)[None, :]
    partial = block_table(block_mask.kv_num_blocks, block_mask.kv_indices)[q // size, kv // size]
    full = block_table(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    return full[q // size, kv // size] | (partial & block_mask.mask_mod(0, 0, q, kv))


@settings(max_examples=15, deadline=None)
@given(nodes=sessions(), block_size=st.sampled_from([1, 2, 4, 8, 16]))
def test_the_block_mask_is_torchs_and_the_ancestor_mask(
    nodes: list[InteractionWithTokenLogpReward], block_size: int
) -> None:
    pack = pack_calls(nodes)
    n = len(pack)
    ours = tree_block_mask(pack, block_size=block_size)
    assert torch.equal(token_mask(ours, n), tree_attention_mask(pack)[0, 0])
    blocks = -(-n // block_size)
    end = torch.zeros(blocks * block_size, dtype=torch.long)
    end[:n] = torch.as_tensor(pack.subtree_end)
    torchs = create_block_mask(tree_mask_mod(end), 1, 1, n, n, device="cpu", BLOCK_SIZE=block_size)
    for kind in ("kv", "full_kv"):
        mine = block_table(getattr(ours, f"{kind}_num_blocks"), getattr(ours, f"{kind}_indices"))
        theirs = block_table(
            getattr(torchs, f"{kind}_num_blocks"), getattr(torchs, f"{kind}_indices")
        )
        assert torch.equal(mine, theirs), kind


def test_the_dense_mask_is_the_interval_test_and_its_additive_form() -> None:
    pack = mixed_pack()
    n = len(pack)
    sees = tree_attention_mask(pack)
    assert sees.shape == (1, 1, n, n)
    assert sees.dtype == torch.bool
    assert [[bool(sees[0, 0, i, j]) for j in range(n)] for i in range(n)] == [
        [pack.sees(i, j) for j in range(n)] for i in range(n)
    ]
    additive = tree_attention_mask(pack, dtype=torch.float32)[0, 0]
    assert torch.equal(additive == 0.0, sees[0, 0])
    assert float(additive.min()) == torch.finfo(torch.float32).min


def full_logits_stats(
    model: Any, pack: TreePack, tokens: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each of `tokens`' logprob and entropy from the model's own forward over the pack, every
    position's logits at once: what the chunked output layer must equal."""
    ids = torch.as_tensor(pack.input_ids)
    output = model(
        input_ids=ids[None],
        position_ids=torch.as_tensor(pack.position_ids)[None],
        attention_mask=tree_attention_mask(pack),
        use_cache=False,
    )
    parents = torch.as_tensor(pack.parent_index)[tokens]
    logp = torch.log_softmax(output.logits[0, parents] / temperature, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp[torch.arange(len(tokens)), ids[tokens]], entropy.detach()


@pytest.fixture(scope="module")
def fp64_model(tiny_model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float64").eval()


# fp32 gradients: the head's weight sums its chunks' gradients in another order than one matmul
# (measured 1.1e-5 on gradients of ~1, 2026-12-05)
@pytest.mark.parametrize(
    ("dtype", "temperature", "chunk_rows", "tolerance", "grad_tolerance"),
    [
        pytest.param(torch.float64, 1.0, 6, 1e-12, 1e-12, id="fp64-chunks-of-6"),
        pytest.param(torch.float64, 1.0, 256, 1e-12, 1e-12, id="fp64-one-chunk"),
        pytest.param(torch.float32, 0.7, 3, 1e-5, 5e-5, id="fp32-temperature-chunks-of-3"),
    ],
)
def test_the_chunked_output_layer_gives_the_full_logits_values_and_gradients(
    tiny_model: Any,
    fp64_model: Any,
    dtype: torch.dtype,
    temperature: float,
    chunk_rows: int,
    tolerance: float,
    grad_tolerance: float,
) -> None:
    model = fp64_model if dtype == torch.float64 else tiny_model
    pack = mixed_pack()
    tokens = np.flatnonzero(pack.parent_index >= 0)[::-1].copy()  # siblings, in no order
    weights = torch.linspace(-1.0, 2.0, len(tokens), dtype=dtype)
    scorer = TokenScorer(model, chunk_rows=chunk_rows)
    logp, entropy = packed_token_stats(scorer, pack, tokens, temperature=temperature)
    assert logp.dtype == dtype
    grads = torch.autograd.grad((logp * weights).sum(), list(model.parameters()))
    full, full_entropy = full_logits_stats(model, pack, torch.as_tensor(tokens), temperature)
    full_grads = torch.autograd.grad((full * weights).sum(), list(model.parameters()))
    assert float((logp - full).detach().abs().max()) <= tolerance
    assert float((entropy - full_entropy).abs().max()) <= tolerance * 10
    assert not entropy.requires_grad
    for grad, expected in zip(grads, full_grads, strict=True):
        scale = max(1.0, float(expected.abs().max()))
        assert float((grad - expected).abs().max()) <= grad_tolerance * scale


def saved_shapes(model: Any, run: Any) -> list[tuple[int, ...]]:
    """The shapes of the tensors `run()` saves for its backward, `model`'s parameters (and
    views of them) left out: a saved parameter is a reference, not a copy."""
    parameters = {p.data_ptr() for p in model.parameters()}
    shapes: list[tuple[int, ...]] = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.data_ptr() not in parameters:
            shapes.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        run()
    return shapes


def test_the_backward_keeps_no_logits_of_the_micro_batch(tiny_model: Any) -> None:
    """The kept activations of a training forward: the model's own forward keeps `[parents,
    vocab]` logits and log_softmax for the backward; the scorer keeps no tensor as wide as the
    vocabulary (each chunk's are recomputed in the backward)."""
    pack = mixed_pack()
    tokens = np.flatnonzero(pack.parent_index >= 0)
    vocab = tiny_model.config.vocab_size

    def wide(shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        return [shape for shape in shapes if vocab in shape]

    full = saved_shapes(
        tiny_model, lambda: full_logits_stats(tiny_model, pack, torch.as_tensor(tokens))
    )
    assert (len(tokens), vocab) in wide(full)
    scorer = TokenScorer(tiny_model, chunk_rows=4)
    chunked = saved_shapes(tiny_model, lambda: packed_token_stats(scorer, pack, tokens))
    assert chunked  # the decoder's activations
    assert wide(chunked) == []
