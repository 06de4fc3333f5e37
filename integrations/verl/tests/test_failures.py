"""Bad input: failed episodes, an agent that always fails, a foreign tokenizer, verl's legacy
worker, and settings that cannot be used."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import LoopBuilder, TinyServerManager, row, sampling_params, yaml_entry
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from rltap.chat import TokenizerMismatch
from rltap.config import ConfigError
from rltap.rollout.branches import AllEpisodesFailed
from rltap.testing.models import cached_qwen_tokenizer_dir


def check_inert(output: AgentLoopOutput, error: str) -> None:
    assert AgentLoopOutput.model_validate(output.model_dump()) == output
    fields = output.as_dict()
    assert fields["prompts"].shape == fields["responses"].shape == (1,)
    assert fields["response_mask"].tolist() == [0]  # nothing in it is trained on
    assert fields["rm_scores"].tolist() == [0.0]
    assert torch.equal(fields["rollout_log_probs"], torch.zeros(1))
    assert error in output.extra_fields["rltap_error"]
    assert output.extra_fields["rltap_reward"] == 0.0


async def test_a_failed_episode_is_one_inert_output(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    loop = build_loop(yaml_entry(agent="verl_agents:BrokenAgent"))
    [output] = await loop.run(sampling_params(verl_config), **row(question="2+2?"))
    check_inert(output, "RuntimeError: no calculator for '2+2?'")


async def test_an_episode_without_llm_calls_is_inert_too(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    loop = build_loop(yaml_entry(agent="verl_agents:SilentAgent"))
    [output] = await loop.run(sampling_params(verl_config), **row(question="2+2?"))
    check_inert(output, "the agent made no LLM call")


async def test_a_reward_rltap_cannot_place_fails_the_episode(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    loop = build_loop(yaml_entry(agent="verl_agents:WordyRewardAgent"))
    [output] = await loop.run(sampling_params(verl_config), **row())
    check_inert(output, "agent.run returned str")


async def test_a_grammar_is_refused_before_it_reaches_verl(
    build_loop: LoopBuilder, verl_config: DictConfig, server_manager: TinyServerManager
) -> None:
    loop = build_loop(yaml_entry(agent="verl_agents:GrammarAgent"))
    [output] = await loop.run(sampling_params(verl_config), **row())
    check_inert(output, "verl's rollout servers take no grammar")
    assert server_manager.calls == []


async def test_an_agent_whose_episodes_all_fail_raises_all_episodes_failed(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    loop = build_loop(yaml_entry(agent="verl_agents:BrokenAgent", max_failed_in_a_row=3))
    params = sampling_params(verl_config)
    for question in ("a", "b"):
        [output] = await loop.run(params, **row(question=question))
        check_inert(output, question)
    with pytest.raises(AllEpisodesFailed, match=r"all 3 episodes failed.*no calculator") as caught:
        await loop.run(params, **row(question="c"))
    assert len(caught.value.errors) == 3
    # Still failing: every later episode raises too, not a quiet zero reward.
    with pytest.raises(AllEpisodesFailed):
        await loop.run(params, **row(question="d"))


async def test_a_success_resets_the_failure_count(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    params = sampling_params(verl_config)
    entry = yaml_entry(agent="verl_agents:FlakyAgent", max_failed_in_a_row=2)
    # verl builds a loop per sample; the agent's episodes share one count in the worker.
    for question in ("fail 1", "ok", "fail 2"):
        outputs = await build_loop(entry).run(params, **row(question=question))
        assert len(outputs) == (2 if question == "ok" else 1)
    with pytest.raises(
        AllEpisodesFailed, match=r"all 2 episodes failed, nothing to train on: .*'fail 2'.*'fail 3'"
    ):
        await build_loop(entry).run(params, **row(question="fail 3"))


def foreign_tokenizer(folder: Path) -> Path:
    """The Qwen tokenizer with another chat template: other text for the same messages."""
    shutil.copytree(cached_qwen_tokenizer_dir(), folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    config_path.write_text(json.dumps(config))
    return folder


async def test_a_tokenizer_that_is_not_verls_is_refused(
    build_loop: LoopBuilder, verl_config: DictConfig, tmp_path: Path
) -> None:
    folder = foreign_tokenizer(tmp_path / "foreign")
    loop = build_loop(yaml_entry(agent="verl_agents:FORKING", tokenizer=str(folder)))
    with pytest.raises(TokenizerMismatch, match="not verl's: the chat templates differ"):
        await loop.run(sampling_params(verl_config), **row(question="2+2?"))


async def test_rltaps_own_copy_of_verls_tokenizer_is_taken(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    folder = str(cached_qwen_tokenizer_dir())
    loop = build_loop(yaml_entry(agent="verl_agents:FORKING", tokenizer=folder))
    outputs = await loop.run(sampling_params(verl_config), **row(question="2+2?"))
    assert len(outputs) == 2


def refusal(build: Callable[[], object]) -> str:
    """The `ConfigError` the loop's construction raised, as verl's worker sees it: inside
    hydra's InstantiationException."""
    with pytest.raises(InstantiationException) as caught:
        build()
    assert isinstance(caught.value.__cause__, ConfigError)
    return str(caught.value.__cause__)


def test_verls_legacy_worker_is_refused_at_construction(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    legacy = verl_config.copy()
    OmegaConf.update(legacy, "trainer.use_v1", False)
    message = refusal(lambda: build_loop(yaml_entry(agent="verl_agents:FORKING"), config=legacy))
    assert "only verl's V1 agent-loop worker takes: set trainer.use_v1=True" in message


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param({"agnet": "x.py:A"}, "unknown rltap setting 'agnet'", id="typo"),
        pytest.param({"agent": None}, "rltap.agent must be", id="no-agent"),
        pytest.param({"discount": 1.5}, r"rltap.discount must be in \[0, 1\]", id="discount"),
        pytest.param({"episode_timeout": 0}, "episode_timeout must be positive", id="timeout"),
        pytest.param({"max_failed_in_a_row": 0}, "at least 1", id="failures"),
        pytest.param({"chat_template_mode": "jinja"}, "chat-template-mode", id="mode"),
    ],
)
def test_settings_that_cannot_be_used_are_refused_when_the_loop_is_built(
    build_loop: LoopBuilder, settings: dict[str, object], message: str
) -> None:
    entry = yaml_entry()
    for key, value in settings.items():
        OmegaConf.update(entry, f"rltap.{key}", value, force_add=True)
    assert re.search(message, refusal(lambda: build_loop(entry)))


async def test_a_missing_data_column_is_named(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    loop = build_loop(yaml_entry(agent="verl_agents:FORKING", data_key="extra"))
    with pytest.raises(ConfigError, match=r"rltap\.data_key 'extra' is not a column"):
        await loop.run(sampling_params(verl_config), **row(question="2+2?"))
