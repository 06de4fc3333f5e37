"""verl's own config and classes around the plugin, with the tiny model generating.

- `verl_config`: verl's `ppo_trainer` config composed with hydra (as `main_ppo` composes it),
  its model the tiny Qwen2 (`rltap.testing.models`);
- `TinyServerManager`: verl's `LLMServerClient.generate` signature, answered by rltap's
  `TransformersEngine` on the tiny model, returning verl's `TokenOutput` with `global_steps`;
- `build_loop`: the agent loop built as verl's worker builds one (hydra instantiate of the
  registry entry or YAML entry, `DictConfigWrap` of the config, the worker's keyword arguments),
  its worker proxies closed after the test.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import hydra
import pytest
import torch
import verl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from rltap.engines.transformers import TransformersEngine
from rltap.record.types import ModelRequest
from rltap.testing.models import cached_tiny_model_dir
from rltap_verl import RltapAgentLoop, close_worker_proxies

# No vendor key or tracer in the environment, telemetry off (as every adapter's tests).
pytest_plugins = ["rltap.testing.fixtures"]

os.environ.setdefault("WANDB_MODE", "disabled")
# Two shared cores: one torch thread is faster than two, and leaves a core to the others.
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[3]
PLUGIN_YAML = REPO / "integrations" / "verl" / "rltap_agent.yaml"
PROMPT_LENGTH = 1024
RESPONSE_LENGTH = 64
GLOBAL_STEPS = 7


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return cached_tiny_model_dir()


@pytest.fixture(scope="session")
def verl_config(tiny_model_dir: Path) -> DictConfig:
    """verl's trainer config, composed from its own ppo_trainer.yaml."""
    folder = Path(verl.__file__).parent / "trainer" / "config"
    overrides = [
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
    ]
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


@pytest.fixture(scope="session")
def verl_tokenizer(tiny_model_dir: Path) -> Any:
    """The tokenizer verl's worker holds (its model config loads the model folder's)."""
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def sampling_params(config: DictConfig, *, validate: bool = False) -> dict[str, Any]:
    """The sampling parameters verl's agent-loop worker hands every run."""
    rollout = config.actor_rollout_ref.rollout
    source = rollout.val_kwargs if validate else rollout
    return {
        "temperature": source.temperature,
        "top_p": source.top_p,
        "top_k": source.top_k,
        "repetition_penalty": 1.0,
        "logprobs": rollout.calculate_log_probs,
    }


def row(**columns: Any) -> dict[str, Any]:
    """One dataset row as verl's V1 worker passes it to `run` (its own keys included)."""
    return {
        "raw_prompt": [{"role": "user", "content": columns.get("question", "")}],
        "data_source": "test",
        "extra_info": {},
        "index": 0,
        "uid": "u0",
        "session_id": 0,
        "global_steps": GLOBAL_STEPS,
        **columns,
    }


class TinyServerManager:
    """verl's server manager (`LLMServerClient.generate`), generating with the tiny model.

    Each call is recorded (`calls`: verl's request id and sampling parameters) and answered as
    verl's servers answer: the tokens, their logprobs, and `global_steps` in `extra_fields`.
    """

    def __init__(self, engine: TransformersEngine, global_steps: int | None = GLOBAL_STEPS) -> None:
        self.engine = engine
        self.global_steps = global_steps
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        **kwargs: Any,
    ) -> TokenOutput:
        self.calls.append((request_id, dict(sampling_params)))
        top_k = sampling_params.get("top_k", -1)
        response = await self.engine.generate(
            ModelRequest(
                input_ids=prompt_ids,
                max_new_tokens=sampling_params["max_tokens"],
                temperature=sampling_params["temperature"],
                top_p=sampling_params["top_p"],
                top_k=max(top_k, 0),
                stop_token_ids=sampling_params.get("stop_token_ids", []),
                seed=sampling_params.get("seed"),
            )
        )
        return TokenOutput(
            token_ids=response.output_tokens,
            log_probs=response.output_logprobs if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )


@pytest.fixture
async def tiny_engine(tiny_model_dir: Path) -> AsyncIterator[TransformersEngine]:
    engine = TransformersEngine(str(tiny_model_dir), num_threads=1)
    await engine.start()
    yield engine
    await engine.close()


@pytest.fixture
def server_manager(tiny_engine: TransformersEngine) -> TinyServerManager:
    return TinyServerManager(tiny_engine)


LoopBuilder = Callable[..., RltapAgentLoop]


def yaml_entry(**settings: Any) -> DictConfig:
    """The plugin's documented YAML entry (rltap_agent.yaml) with `settings` changed."""
    [entry] = OmegaConf.load(PLUGIN_YAML)
    for key, value in settings.items():
        entry.rltap[key] = value
    assert isinstance(entry, DictConfig)
    return entry


@pytest.fixture
async def build_loop(
    verl_config: DictConfig, verl_tokenizer: Any, server_manager: TinyServerManager
) -> AsyncIterator[LoopBuilder]:
    """`build_loop(entry, config=..., manager=...)`: the agent loop as verl's worker builds
    it from the registry entry `entry`; the proxies the test started stop at teardown."""

    def build(
        entry: DictConfig | dict[str, Any],
        *,
        config: DictConfig | None = None,
        manager: Any = None,
    ) -> RltapAgentLoop:
        config = verl_config if config is None else config
        loop = hydra.utils.instantiate(
            config=entry,
            trainer_config=DictConfigWrap(config=config),
            server_manager=server_manager if manager is None else manager,
            tokenizer=verl_tokenizer,
            processor=None,
            hf_model_type="qwen2",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
        )
        assert isinstance(loop, RltapAgentLoop)
        return loop

    yield build
    await close_worker_proxies()
