"""The policy loss on packed trees (rltap.train.loss, .advantages, .trainer): the packed loss has
the gradient of the same loss over each interaction's own sequence (within 1e-5), a step's
gradient does not depend on how its packs are cut into micro-batches, and the objective's parts
(clipping, the behaviour weight's cap, the KL estimate, group-normalised advantages, stale
tokens) do what they say."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch

from rltap.config import UpdateConfig
from rltap.record.pack import TreePack, pack_interactions
from rltap.testing.packs import recorded_call as call
from rltap.train.advantages import assign_advantages, trainable_tokens
from rltap.train.forward import packed_token_stats
from rltap.train.loss import k3, policy_loss
from rltap.train.trainer import PolicyTrainer

TOLERANCE = 1e-5


def recorded_tree(seed: int = 0) -> TreePack:
    """Two samples of a prompt, the first continued twice, with distinct rewards and
    behaviour logprobs that differ from the model's (so the weights are not all 1)."""
    first = call([1, 2, 3, 4], [10, 11, 12])
    second = call([1, 2, 3, 4], [20, 21])
    third = call([5, 6], [30, 31, 32], first)
    fourth = call([7], [40, 41], third)
    calls = [first, second, third, fourth]
    rewards = dict(zip((c.interaction_id for c in calls), (0.5, -1.0, 2.0, 1.0), strict=True))
    pack = pack_interactions(calls, rewards)
    rng = np.random.default_rng(seed)
    generated = pack.loss_mask == 1
    pack.logprobs[generated] = -rng.uniform(5.0, 15.0, int(generated.sum()))
    return pack


def packed_loss(model: Any, pack: TreePack, update: UpdateConfig) -> torch.Tensor:
    tokens = np.flatnonzero(pack.loss_mask)
    logp, entropy = packed_token_stats(model, pack, tokens)
    sums = policy_loss(
        logp,
        torch.as_tensor(pack.logprobs[tokens]),
        logp.detach(),
        torch.as_tensor(pack.advantages[tokens]),
        update,
        entropy=entropy,
    )
    return sums.loss / len(tokens)


def unpacked_loss(model: Any, pack: TreePack, update: UpdateConfig) -> torch.Tensor:
    """The same loss, each interaction's outputs scored by a plain forward over its own
    prompt and output (the `individual` export's sequences)."""
    total = torch.zeros(())
    tokens = 0
    for index in range(len(pack.interaction_ids)):
        last = int(np.flatnonzero(pack.interaction_index == index)[-1])
        path = pack.path_to(last)
        ids = torch.as_tensor(pack.input_ids[path], dtype=torch.long)
        logits = model(input_ids=ids[None]).logits[0]
        logp_all = torch.log_softmax(logits[:-1], dim=-1).gather(-1, ids[1:, None])[:, 0]
        own = np.flatnonzero(pack.interaction_index[path] == index)
        logp = logp_all[own - 1]
        at = path[own]
        sums = policy_loss(
            logp,
            torch.as_tensor(pack.logprobs[at]),
            logp.detach(),
            torch.as_tensor(pack.advantages[at]),
            update,
        )
        total = total + sums.loss
        tokens += len(own)
    return total / tokens


def gradients(model: Any, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_packed_and_unpacked_losses_have_the_same_gradients(tiny_model: Any) -> None:
    pack = recorded_tree()
    assign_advantages([pack], "group")
    update = UpdateConfig(clip=0.2, behaviour_cap=5.0)
    packed = gradients(tiny_model, packed_loss(tiny_model, pack, update))
    unpacked = gradients(tiny_model, unpacked_loss(tiny_model, pack, update))
    assert packed.keys() == unpacked.keys()
    assert len(packed) == len(list(tiny_model.parameters()))
    gaps = {name: float((packed[name] - unpacked[name]).abs().max()) for name in packed}
    assert max(gaps.values()) <= TOLERANCE, sorted(gaps.items(), key=lambda kv: -kv[1])[:3]
    assert max(float(g.abs().max()) for g in packed.values()) > 1e-3  # a real gradient


def first_moments(model: Any, packs: list[TreePack], budget: int) -> list[torch.Tensor]:
    """AdamW's first moment after one step, (1 - beta1) x the step's gradient."""
    trainer = PolicyTrainer(model, UpdateConfig(lr=1e-3, micro_batch_tokens=budget))
    trainer.step(copy.deepcopy(packs), version=0)
    return [trainer.optimizer.state[p]["exp_avg"] for p in model.parameters()]


def test_a_steps_gradient_does_not_depend_on_its_micro_batches(tiny_model: Any) -> None:
    packs = [recorded_tree(0), recorded_tree(1)]
    whole = first_moments(copy.deepcopy(tiny_model), packs, budget=4096)
    cut = first_moments(copy.deepcopy(tiny_model), packs, budget=16)  # splits both 17-token trees
    assert max(float((a - b).abs().max()) for a, b in zip(whole, cut, strict=True)) <= 1e-6


def test_group_advantages_are_normalised_per_pack() -> None:
    pack = recorded_tree()
    assign_advantages([pack], "group")
    per_segment = {
        int(i): float(pack.advantages[pack.interaction_index == i][0])
        for i in np.unique(pack.interaction_index[pack.interaction_index >= 0])
    }
    values = np.array(list(per_segment.values()))
    assert abs(values.mean()) < 1e-6
    assert abs(values.std() - 1.0) < 1e-4
    assert (pack.advantages[pack.interaction_index < 0] == 0).all()


def test_a_narrowed_loss_mask_normalises_over_its_own_segments_alone() -> None:
    """A policy's trainer narrows the mask to its calls: their rewards are judged among
    themselves, whatever the scale of the other calls' rewards (per-agent rewards)."""
    calls = [call([1, 2], [10 + i, 11]) for i in range(4)]
    rewards = dict(zip((c.interaction_id for c in calls), (0.1, 0.3, 5.0, 9.0), strict=True))
    pack = pack_interactions(calls, rewards)
    mine = np.isin(
        pack.interaction_index, [pack.interaction_ids.index(c.interaction_id) for c in calls[:2]]
    )
    pack.loss_mask = (pack.loss_mask.astype(bool) & mine).astype(pack.loss_mask.dtype)
    assign_advantages([pack], "group")
    own = [
        float(pack.advantages[pack.interaction_index == i][0])
        for i in np.unique(pack.interaction_index[mine])
    ]
    assert own == pytest.approx([-1.0, 1.0], abs=1e-4)  # 0.1 and 0.3 against each other only


def test_a_group_of_equal_rewards_carries_no_signal() -> None:
    pack = recorded_tree()
    pack.rewards[pack.interaction_index >= 0] = 3.0
    assign_advantages([pack], "group")
    assert (pack.advantages == 0).all()
    assign_advantages([pack], "none")
    assert np.allclose(pack.advantages[pack.interaction_index >= 0], 3.0)


def test_stale_tokens_are_left_out_and_counted() -> None:
    pack = recorded_tree()
    generated = np.flatnonzero(pack.loss_mask)
    pack.versions[generated[:3]] = 1  # three tokens from version 1, the rest from version 4
    pack.versions[generated[3:]] = 4
    kept, stale = trainable_tokens(pack, version=5, max_staleness=2)
    assert stale == 3
    assert list(kept) == list(generated[3:])
    kept, stale = trainable_tokens(pack, version=5, max_staleness=4)
    assert stale == 0
    assert len(kept) == len(generated)


def test_clipping_and_the_behaviour_cap() -> None:
    logp = torch.tensor([0.0, 0.0, 0.0, 0.0])
    proximal = torch.log(torch.tensor([1 / 1.5, 1 / 1.5, 1.0, 1.0]))  # ratio 1.5, 1.5, 1, 1
    behaviour = proximal - torch.tensor([0.0, 0.0, 10.0, 0.0])  # weight 1, 1, e^10 (capped), 1
    advantages = torch.tensor([1.0, -1.0, 1.0, 1.0])
    sums = policy_loss(
        logp, behaviour, proximal, advantages, UpdateConfig(clip=0.2, behaviour_cap=5.0)
    )
    # token 0: ratio clipped at 1.2 for a positive advantage; token 1: min keeps 1.5 x -1;
    # token 2: weight capped at 5; token 3: plain.
    assert float(sums.loss) == pytest.approx(-(1.2 - 1.5 + 5.0 * 1.0 + 1.0), rel=1e-6)
    assert sums.clipped == 1.0
    assert sums.tokens == 4


def test_kl_estimate_is_zero_at_the_reference_and_positive_away_from_it() -> None:
    logp = torch.tensor([-1.0, -2.0])
    zero = torch.zeros(2)
    update = UpdateConfig(kl_coef=0.1)
    at_reference = policy_loss(logp, logp, logp, zero, update, reference=logp)
    assert at_reference.kl == 0.0
    away = policy_loss(logp, logp, logp, zero, update, reference=logp - 0.5)
    assert away.kl > 0
    assert float(away.loss) == pytest.approx(0.1 * away.kl, rel=1e-6)


def test_a_kl_penalty_needs_a_reference(tiny_model: Any) -> None:
    with pytest.raises(ValueError, match="reference"):
        PolicyTrainer(tiny_model, UpdateConfig(kl_coef=0.1))


def test_k3_is_never_negative_and_zero_only_where_the_policies_agree() -> None:
    """fp32 logprobs a hair apart (what engine and trainer give for the same weights): the
    naive fp32 exp(d) - d - 1 goes below zero there; k3 stays >= 0 and matches float64."""
    generator = torch.Generator().manual_seed(0)
    logp = -torch.rand(100_000, generator=generator, dtype=torch.float32) * 5
    for scale in (1e-7, 1e-5, 1e-3, 1.0):
        anchor = logp + torch.randn(logp.shape, generator=generator) * scale
        naive = torch.exp(anchor - logp) - (anchor - logp) - 1.0
        if scale == 1e-7:
            assert float(naive.min()) < 0  # what the estimate looked like before
        values = k3(anchor, logp)
        assert values.dtype == torch.float32
        assert float(values.min()) >= 0.0
        d = anchor.double() - logp.double()
        assert torch.allclose(values.double(), torch.expm1(d) - d, rtol=1e-6, atol=1e-30)
    assert torch.count_nonzero(k3(logp, logp)) == 0
