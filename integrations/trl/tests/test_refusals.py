"""What rltap_trl refuses, each with an error that names the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import make_trainer, prompt_dataset, repeated, server_args
from transformers import AutoTokenizer
from trl_agents import one_call_agent

from rltap.chat import TokenizerMismatch
from rltap.rollout.branches import AllEpisodesFailed
from rltap_trl import AgentRollout, UnsupportedTrainer

FAILING = [{"question": f"q{i}", "answer": "0", "fail": True} for i in range(2)]


def test_colocated_vllm_is_refused(trainer: Any, closing: list[Any]) -> None:
    with server_args(trainer.args, use_vllm=True, vllm_mode="colocate"):
        rollout = AgentRollout(one_call_agent())
        closing.append(rollout)
        with pytest.raises(UnsupportedTrainer, match='Use vllm_mode="server"'):
            rollout(repeated(FAILING), trainer)
        assert rollout.proxy_url is None  # nothing started


def test_a_sharded_model_is_refused(trainer: Any, closing: list[Any]) -> None:
    # What HF's Trainer sets when accelerate runs FSDP (its own attribute, read by rltap_trl).
    trainer.is_fsdp_enabled = True
    try:
        rollout = AgentRollout(one_call_agent())
        closing.append(rollout)
        with pytest.raises(UnsupportedTrainer, match=r"sharded \(FSDP\).*vllm_mode=\"server\""):
            rollout(repeated(FAILING), trainer)
    finally:
        trainer.is_fsdp_enabled = False


def test_a_trainer_tokenizer_other_than_the_models_is_refused(
    tiny_model_dir: Path, tmp_path: Path, closing: list[Any]
) -> None:
    rollout = AgentRollout(one_call_agent())
    closing.append(rollout)
    trainer = make_trainer(tiny_model_dir, tmp_path, rollout, prompt_dataset(FAILING))
    other = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    other.add_tokens(["<rltap-extra>"])
    trainer.processing_class = other  # TRL would tokenize and train with it
    with pytest.raises(TokenizerMismatch, match="not TRL's: the vocabularies differ"):
        rollout(repeated(FAILING), trainer)


def test_a_rendering_tokenizer_other_than_trls_is_refused(
    trainer: Any, tiny_model_dir: Path, closing: list[Any]
) -> None:
    other = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    other.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    rollout = AgentRollout(one_call_agent(), tokenizer=other)
    closing.append(rollout)
    with pytest.raises(TokenizerMismatch, match="the chat templates differ"):
        rollout(repeated(FAILING), trainer)


def test_trl_gets_a_clear_error_when_every_episode_fails(
    tiny_model_dir: Path, tmp_path: Path, closing: list[Any]
) -> None:
    rollout = AgentRollout(one_call_agent())
    closing.append(rollout)
    trainer = make_trainer(tiny_model_dir, tmp_path, rollout, prompt_dataset(FAILING), max_steps=1)
    with pytest.raises(AllEpisodesFailed, match=r"all 4 episodes failed.*the agent fails on"):
        trainer.train()


def test_one_rollout_serves_one_trainer(
    trainer: Any, tiny_model_dir: Path, tmp_path: Path, closing: list[Any]
) -> None:
    rows = [{"question": "What is 2+3?", "answer": "5"}]
    rollout = AgentRollout(one_call_agent())
    closing.append(rollout)
    rollout(repeated(rows), trainer)
    other = make_trainer(tiny_model_dir, tmp_path, rollout, prompt_dataset(rows))
    with pytest.raises(ValueError, match="make one per GRPOTrainer"):
        rollout(repeated(rows), other)


def test_episodes_per_prompt_must_be_positive() -> None:
    with pytest.raises(ValueError, match="episodes_per_prompt must be at least 1"):
        AgentRollout(one_call_agent(), episodes_per_prompt=0)
