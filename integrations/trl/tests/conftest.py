"""A real GRPOTrainer on the tiny random model (rltap.testing.models), CPU, no telemetry.

TRL calls the rollout synchronously, so the tests are plain functions; the proxy, the engine
and the agents run on the rollout's own thread.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

# `no_vendor_env`: no vendor key, address or tracing switch in the environment.
pytest_plugins = ["rltap.testing.fixtures"]

# Two shared cores: one torch thread is faster than two, and leaves a core to the others.
torch.set_num_threads(1)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func's experimental warning
os.environ.setdefault("WANDB_DISABLED", "true")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from rltap.testing.models import cached_tiny_model_dir

    return cached_tiny_model_dir()


def grpo_args(out: Path, **overrides: Any) -> Any:
    """GRPOConfig for CPU tests: small groups, no reports, nothing saved."""
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": str(out),
        "use_cpu": True,
        # GRPOConfig's default bf16 makes accelerate run every forward of the model under bf16
        # autocast, the engine's too: the fp32 token-fidelity bound holds in fp32.
        "bf16": False,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 16,
        "seed": 7,
        "dataloader_num_workers": 0,
    }
    return GRPOConfig(**{**settings, **overrides})


def make_trainer(model_dir: Path, out: Path, rollout: Any, dataset: Any, **args: Any) -> Any:
    """A GRPOTrainer on a fresh copy of the tiny model, rewarded by `rltap_reward`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from rltap_trl import rltap_reward

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return GRPOTrainer(
        model=model,
        args=grpo_args(out, **args),
        train_dataset=dataset,
        processing_class=tokenizer,
        reward_funcs=rltap_reward,
        rollout_func=rollout,
    )


def prompt_dataset(rows: list[dict[str, Any]]) -> Any:
    """TRL's dataset: each agent row as a row's `prompt` (what rollout_func passes the agent)."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": row} for row in rows])


@pytest.fixture
def rows() -> list[dict[str, Any]]:
    return [
        {"question": "What is 2+3?", "answer": "5"},
        {"question": "What is 4*5?", "answer": "20"},
        {"question": "What is 9-7?", "answer": "2"},
        {"question": "What is 8/2?", "answer": "4"},
    ]


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    """Rollouts to close at the end of the test, whatever it did."""
    opened: list[Any] = []
    yield opened
    for rollout in opened:
        rollout.close()


@pytest.fixture(scope="module")
def trainer(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A GRPOTrainer (num_generations=2) whose rollout_func the tests call as TRL does, with
    each prompt repeated twice in a row; its own rollout_func is never called."""
    rows = [{"question": "unused", "answer": "0"}]

    def unused(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        raise AssertionError("the tests call their own rollouts")

    out = tmp_path_factory.mktemp("trainer")
    return make_trainer(tiny_model_dir, out, unused, prompt_dataset(rows))


def repeated(rows: list[dict[str, Any]], times: int = 2) -> list[dict[str, Any]]:
    """TRL's prompts for `rows`: each repeated `times` (num_generations) in a row."""
    return [row for row in rows for _ in range(times)]


@contextlib.contextmanager
def server_args(args: Any, **fields: Any) -> Iterator[Any]:
    """`args` with `fields` set in place for the block (vLLM's, which a trainer constructed with
    them would need the vllm package for), then restored."""
    saved = {name: getattr(args, name) for name in [*fields, "vllm_server_base_url"]}
    for name, value in fields.items():
        setattr(args, name, value)
    try:
        yield args
    finally:
        for name, value in saved.items():
            setattr(args, name, value)
