"""Several policies' adapters on their way out of the trainer: into the engine after a step
(`PolicySync`), and into a checkpoint and back (`save_policies`, `check_policies_checkpoint`,
`load_optimizers`).

The sync moves only the adapters a step changed (`PolicyTrainers.step`'s `changed`), each
with its policy's own version: the policy's version plus one. An engine in this process
(`takes_state_dict`: transformers, scripted) gets `AdapterWeights(name=policy)`
(`rltap.engines.lora.adapter_of(model, policy)`) and moves that policy's version only; a
server engine gets peft's adapter folder `folder/<policy>/adapter-v<N>/` (the adapter alone,
its files at the top of the folder, the folders of versions `ADAPTER_FOLDERS_KEPT` or more
before removed), handed to `update_weights(folder, version=N, policy=name)`: an engine must
take a `policy` keyword to load it under the policy's name (vLLM's does: each policy's adapter
is served under a name of its own, `rltap.engines.vllm_lora`; one that does not is refused).

A checkpoint `RUN/step-N/` holds one peft adapter folder per policy, `step-N/<policy>/`
(`adapter_config.json`, naming the base model by its absolute path, and
`adapter_model.safetensors`: peft's `save_pretrained` of a model whose adapters are all named),
with that policy's AdamW state in `step-N/<policy>/optimizer/` (DCP, as
`rltap.train.gather.save_optimizer_state` writes it; none for a policy that never stepped,
whose AdamW holds no state yet), and in `run_state.json` under
`"policies"` each policy's LoRA rank and version. Resuming refuses a checkpoint whose policy
names or ranks are not the run's (`PolicyMismatch`), before anything is loaded.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltap.config.flags import ConfigError
from rltap.config.policies import Policies
from rltap.engines.base import WeightFolder, WeightSource
from rltap.engines.lora import ADAPTER_FOLDERS_KEPT, adapter_of
from rltap.train.gather import load_optimizer_state, save_optimizer_state
from rltap.train.lora import LoraMismatch
from rltap.train.policies import PolicyTrainers, active_adapter
from rltap.train.run_dir import OPTIMIZER, Checkpoint, RunDir

if TYPE_CHECKING:
    from rltap.engines.base import InferenceEngine

__all__ = [
    "POLICIES_STATE",
    "PolicyMismatch",
    "PolicySync",
    "check_policies_checkpoint",
    "load_optimizers",
    "policy_source",
    "save_policies",
]

# The key of run_state.json that holds each policy's rank and version.
POLICIES_STATE = "policies"
_ADAPTER_FOLDER = re.compile(r"adapter-v(\d+)")


class PolicyMismatch(LoraMismatch):
    """A checkpoint's policies (names or LoRA ranks) are not the run's."""


def policy_source(
    model: Any, policy: str, *, state_dict: bool, folder: Path, version: int
) -> WeightSource:
    """Policy `policy`'s adapter of peft model `model` as an engine takes it: an
    `AdapterWeights` named after it (`state_dict`: an engine in this process), or the
    `WeightFolder` that writes it into `folder/<policy>/adapter-v<version>/`."""
    if state_dict:
        adapter = adapter_of(model, policy)
        assert adapter is not None  # a peft model's
        return adapter
    path = Path(folder) / policy / f"adapter-v{version}"
    save = functools.partial(_save_adapter, model, policy, version)
    return WeightFolder(path, save=save, adapter=True)


async def _save_adapter(model: Any, policy: str, version: int, path: Path) -> None:
    def write() -> None:
        parent = path.parent
        parent.mkdir(parents=True, exist_ok=True)
        for old in parent.iterdir():
            match = _ADAPTER_FOLDER.fullmatch(old.name)
            if match and int(match.group(1)) <= version - ADAPTER_FOLDERS_KEPT:
                shutil.rmtree(old, ignore_errors=True)
        # peft writes a named adapter into a folder of its name under the one it is given
        staging = parent / f".{path.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(str(staging), selected_adapters=[policy])
        shutil.rmtree(path, ignore_errors=True)
        (staging / policy).rename(path)
        shutil.rmtree(staging, ignore_errors=True)

    await asyncio.to_thread(write)


class PolicySync:
    """Moves the adapters a step changed into `engine`, each policy's version on its own;
    `folder` (`RUN/sync/`) is where a server engine's adapter folders are written."""

    def __init__(self, engine: InferenceEngine, folder: Path) -> None:
        self.engine = engine
        self.folder = Path(folder)

    async def push(
        self, trainers: PolicyTrainers, changed: Iterable[str], *, again: bool = False
    ) -> dict[str, int]:
        """Send each policy of `changed` its adapter at its next version (the version after
        `trainers.versions`, which moves with it), or with `again` at the version it has (an
        engine that starts from the base model, after a resume); returns the versions sent."""
        moved = {}
        for name in changed:
            version = trainers.versions[name] + (0 if again else 1)
            source = policy_source(
                trainers.model,
                name,
                state_dict=self.engine.takes_state_dict,
                folder=self.folder,
                version=version,
            )
            if isinstance(source, WeightFolder):
                moved[name] = await self._push_folder(source, name, version)
            else:
                moved[name] = await self.engine.update_weights(source, version=version)
            trainers.versions[name] = moved[name]
        return moved

    async def _push_folder(self, source: WeightFolder, name: str, version: int) -> int:
        update: Any = self.engine.update_weights
        if "policy" not in inspect.signature(update).parameters:
            msg = (
                f"{type(self.engine).__name__} loads no LoRA adapter folder under a policy's "
                f"name (policy {name!r}): it takes one adapter per run"
            )
            raise ConfigError(msg)
        return int(await update(source, version=version, policy=name))


def save_policies(
    run: RunDir,
    step: int,
    trainers: PolicyTrainers,
    tokenizer: Any,
    state: Mapping[str, Any],
) -> Checkpoint:
    """Write `RUN/step-N/` (module docstring): every policy's adapter and AdamW state, the
    tokenizer, and `state` with each policy's rank and version under `"policies"`."""
    model = trainers.model
    policies = {
        name: {"lora_rank": int(model.peft_config[name].r), "version": trainers.versions[name]}
        for name in trainers.trainers
    }

    def save_optimizers(folder: Path) -> None:
        # `folder` is step-N/optimizer/: each policy's goes into its own adapter folder.
        for name, trainer in trainers.trainers.items():
            if not trainer.optimizer.state:  # a policy that never stepped has none: no folder
                continue
            with active_adapter(model, name):  # DCP names the parameters that require grad
                save_optimizer_state(model, trainer.optimizer, folder.parent / name / OPTIMIZER)

    full = {**state, POLICIES_STATE: policies}
    return run.save_checkpoint(step, model, tokenizer, save_optimizers, full)


def check_policies_checkpoint(checkpoint: Checkpoint, policies: Policies) -> dict[str, int]:
    """The policies' versions saved in `checkpoint`, after checking that it holds the run's
    policies at their ranks (`PolicyMismatch` otherwise: resume with the same [policies])."""
    saved = checkpoint.state.get(POLICIES_STATE)
    if not isinstance(saved, dict):
        msg = f"{checkpoint.path} holds no policies' adapters: it was not trained with [policies]"
        raise PolicyMismatch(msg)
    if sorted(saved) != sorted(policies):
        msg = (
            f"{checkpoint.path} holds the adapters of policies {sorted(saved)}; the run has "
            f"{sorted(policies)}: resume with the same [policies]"
        )
        raise PolicyMismatch(msg)
    for name, policy in policies.items():
        rank = saved[name]["lora_rank"]
        if rank != policy.lora_rank:
            msg = (
                f"{checkpoint.path} holds policy {name!r} as a rank-{rank} adapter; the run "
                f"gives it lora_rank {policy.lora_rank}: resume with the same rank"
            )
            raise PolicyMismatch(msg)
        if not (checkpoint.path / name).is_dir():
            msg = f"{checkpoint.path} lacks policy {name!r}'s adapter folder"
            raise PolicyMismatch(msg)
    return {name: int(saved[name]["version"]) for name in policies}


def load_optimizers(trainers: PolicyTrainers, checkpoint: Checkpoint) -> None:
    """Load each policy's AdamW state from `checkpoint` (`step-N/<policy>/optimizer/`)."""
    for name, trainer in trainers.trainers.items():
        folder = checkpoint.path / name / OPTIMIZER
        if not folder.is_dir():  # the policy had not stepped: its AdamW holds no state yet
            continue
        with active_adapter(trainers.model, name):
            load_optimizer_state(trainers.model, trainer.optimizer, folder)
