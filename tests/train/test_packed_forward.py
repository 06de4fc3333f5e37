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
