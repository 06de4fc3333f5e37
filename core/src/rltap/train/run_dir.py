"""A training run's folder (`rltap train --out RUN`): metrics, plots, rollouts, checkpoints, resume.

Layout:
- `metrics.jsonl`: one JSON object per update, `{"step": N, **metrics}`, in step order. Step N is
  the N-th update (1-based). The loop logs these keys (floats unless said otherwise):
  `reward_mean`, `reward_std` (the rollouts' episode rewards), `kl` (to the reference policy),
  `entropy`, `clip_fraction` (tokens whose ratio was clipped), `tokens` (int, trained on),
  `stale_tokens` (int, left out as older than `--max-staleness` versions), `rollout_seconds`,
  `train_seconds`, `sync_seconds`, `loss`, `grad_norm`, `version` (int, the policy version after
  the update); with policies, each policy's too, as `<policy>/<key>` (`rltap.train.policy_leader`).
  A non-finite value is written as Python's json writes it (`NaN`, `Infinity`).
- `tensorboard/`: the same numbers as TensorBoard scalars, tag = key, global step = N.
  With `--eval-data`, the steps that end with a held-out evaluation also log `eval_reward`,
  `eval_reward_std`, `eval_pass_at_1` and `eval_seconds`, and a line `{"step": 0, ...}` with
  only these is the evaluation before the first update.
- `reward.png`: `reward_mean` per step with a `reward_std` band, and `eval_reward` when logged;
  with policies, each policy's `<policy>/reward_mean` (and `<policy>/eval_reward_mean`) too.
- `rollouts/step-N/`: what step N's rollouts wrote; `eval/step-N/`: the held-out evaluation
  after update N (`rltap.rollout.evaluate`'s files); `sync/`: weights on their way to an engine.
- `step-N/`: the checkpoint after update N, a Hugging Face model folder (`from_pretrained` loads
  it) with the tokenizer, `optimizer/` (AdamW's state as torch.distributed.checkpoint shards,
  one per trainer rank, which load at any number of ranks: `rltap.train.gather`) and
  `run_state.json` (the loop's own state). A LoRA run's (`--lora-rank`) holds peft's adapter
  folder instead of the model (`adapter_config.json`, naming the base model by its absolute
  path, and `adapter_model.safetensors`) and the base model's `generation_config.json`:
  transformers' `from_pretrained` loads it as the base model with the adapter (peft installed),
  so `rltap eval --model RUN/step-N` works as for a full run.
  It is written as `.step-N.partial/` and renamed when complete, so a run killed
  mid-save leaves the previous checkpoint as the last one and a `.partial` folder that
  `last_checkpoint` ignores and removes.

Resuming: `resume_from(last_checkpoint())` drops what the run wrote after that checkpoint
(metrics lines, rollout folders, later checkpoints, TensorBoard events, these by `purge_step`), so
the resumed run writes each step once.

Usage:

    run = RunDir(Path("RUN"))
    checkpoint = run.last_checkpoint()
    run.resume_from(checkpoint)
    ...
    run.log(step, {"reward_mean": 0.5, "reward_std": 0.1, ...})
    run.save_checkpoint(step, model, tokenizer, save_optimizer, {"version": step})
    run.plot_rewards()
    run.close()
"""

from __future__ import annotations

import json
import numbers
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from rltap._lazy import require_module

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = [
    "METRICS",
    "REWARD_PLOT",
    "TENSORBOARD",
    "TRAIN_EXTRA",
    "Checkpoint",
    "RunDir",
    "read_metrics",
    "updates_logged",
]

METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
REWARD_PLOT = "reward.png"
TRAIN_EXTRA = "rltap[train]"
OPTIMIZER = "optimizer"
RUN_STATE = "run_state.json"
# The plot's size in inches at PLOT_DPI: 1000 x 500 pixels.
PLOT_INCHES = (10.0, 5.0)
PLOT_DPI = 100

_CHECKPOINT = re.compile(r"step-(\d+)")
_PARTIAL = re.compile(r"\.step-(\d+)\.partial")
_STALE = re.compile(r"\.step-(\d+)\.stale")


def _import(module: str) -> ModuleType:
    """`module`, or an ImportError naming the extra that installs it."""
    return require_module(module, TRAIN_EXTRA, "rltap's training run folder")


def _fsync_tree(folder: Path) -> None:
    """Flush every file under `folder` to disk, so the rename after it publishes whole files."""
    for path in folder.rglob("*"):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())


def _discard(path: Path, step: int) -> None:
    """Remove a checkpoint folder: renamed to a partial one first, so a kill halfway through the
    removal leaves no half-deleted `step-N/` that still looks complete."""
    doomed = path.with_name(f".step-{step}.partial")
    shutil.rmtree(doomed, ignore_errors=True)
    path.rename(doomed)
    shutil.rmtree(doomed)


def _number(value: float) -> float:
    """A metric as JSON takes it: integers (token counts, versions; numpy's too) stay integers,
    the rest (numpy scalars, 0-d tensors) become floats."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return float(value)


def _steps(folder: Path, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
    """The folders in `folder` whose name `pattern` matches, with their step, by step (a list:
    the callers rename and remove them)."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = pattern.fullmatch(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


@dataclass(frozen=True)
class Checkpoint:
    """A complete `step-N/` folder: the weights after update `step` and the loop's saved state."""

    step: int
    path: Path
    state: dict[str, Any]

    @property
    def optimizer_path(self) -> Path:
        return self.path / OPTIMIZER


def _policy_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The per-policy rewards logged (`<policy>/reward_mean`, `<policy>/eval_reward_mean`)."""
    keys = {
        key for row in rows for key in row if key.endswith(("/reward_mean", "/eval_reward_mean"))
    }
    return sorted(keys)


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """`run`'s metrics.jsonl, one dict per logged step; also while the run's process writes it."""
    path = Path(run) / METRICS
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    # A line being written (or a run killed mid-write) has no newline yet: not a logged step.
    return [json.loads(line) for line in lines[:-1] if line]


def updates_logged(run: Path) -> int:
    """The training steps `run` has logged so far (not step 0, the evaluation before them)."""
    return sum(m["step"] > 0 for m in read_metrics(run))


class RunDir:
    """The folder of one training run (layout in the module docstring); one process writes it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._writer: SummaryWriter | None = None
        # Set by resume_from: the next TensorBoard writer hides the events from this step on.
        self._purge_step: int | None = None

    def __enter__(self) -> RunDir:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def rollout_dir(self, step: int) -> Path:
        """`RUN/rollouts/step-N/`, created."""
        path = self.path / "rollouts" / f"step-{step}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def eval_dir(self, step: int) -> Path:
        """`RUN/eval/step-N/`, created: the held-out evaluation after update N (0: before)."""
        path = self.path / "eval" / f"step-{step}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def sync_dir(self) -> Path:
        """`RUN/sync/`, created: where disk-based weight sync writes the weights."""
        path = self.path / "sync"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- metrics ---------------------------------------------------------------------------------

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Append `{"step": step, **metrics}` to metrics.jsonl and each value as a TensorBoard
        scalar; both are flushed before it returns."""
        if "step" in metrics:
            msg = "metrics may not have a 'step' key: the step is the first argument"
            raise ValueError(msg)
        values = {key: _number(value) for key, value in metrics.items()}
        line = json.dumps({"step": step, **values}) + "\n"
        writer = self._tensorboard()  # first: without tensorboard, nothing is half-logged
        with (self.path / METRICS).open("a", encoding="utf-8") as handle:
            handle.write(line)
        for key, value in values.items():
            writer.add_scalar(key, value, global_step=step)
        writer.flush()

    def metrics(self) -> list[dict[str, Any]]:
        """metrics.jsonl read back, one dict per logged step."""
        return read_metrics(self.path)

    def _tensorboard(self) -> SummaryWriter:
        if self._writer is None:
            module = _import("torch.utils.tensorboard")
            self._writer = module.SummaryWriter(
                str(self.path / TENSORBOARD), purge_step=self._purge_step
            )
            self._purge_step = None
        return self._writer

    def plot_rewards(self) -> Path:
        """`RUN/reward.png`: reward_mean per step with a +-reward_std band (written whole)."""
        _import("matplotlib")
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        rows = [row for row in self.metrics() if "reward_mean" in row]
        steps = [row["step"] for row in rows]
        mean = [float(row["reward_mean"]) for row in rows]
        std = [float(row.get("reward_std", 0.0)) for row in rows]
        # A Figure with its own Agg canvas: no pyplot state, no display needed.
        figure = Figure(figsize=PLOT_INCHES, dpi=PLOT_DPI)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.fill_between(
            steps,
            [m - s for m, s in zip(mean, std, strict=True)],
            [m + s for m, s in zip(mean, std, strict=True)],
            alpha=0.25,
            label="± reward_std",
        )
        axes.plot(steps, mean, marker="o", label="reward_mean")
        evaluated = [row for row in self.metrics() if "eval_reward" in row]
        if evaluated:  # the held-out score, from step 0 (before the first update) on
            eval_steps = [row["step"] for row in evaluated]
            eval_mean = [float(row["eval_reward"]) for row in evaluated]
            axes.plot(eval_steps, eval_mean, marker="s", label="eval_reward (held out)")
        for key in _policy_keys(self.metrics()):  # with policies, a line per policy and score
            logged = [row for row in self.metrics() if key in row]
            steps_of = [row["step"] for row in logged]
            axes.plot(steps_of, [float(row[key]) for row in logged], linestyle="--", label=key)
        axes.set(xlabel="step", ylabel="reward", title=f"reward per step ({self.path.name})")
        axes.grid(visible=True, alpha=0.3)
        if rows or evaluated:
            axes.legend(loc="best")
        target = self.path / REWARD_PLOT
        partial = target.with_name(f".{REWARD_PLOT}.partial")
        figure.savefig(partial, format="png", dpi=PLOT_DPI)
        partial.replace(target)
        return target

    # -- checkpoints -----------------------------------------------------------------------------

    def save_checkpoint(
        self,
        step: int,
        model: Any,
        tokenizer: Any,
        save_optimizer: Callable[[Path], None],
        state: Mapping[str, Any],
    ) -> Checkpoint:
        """Write `RUN/step-N/`: the model (`save_pretrained`, safetensors; a peft model's adapter
        and its base model's generation config), the tokenizer, the optimizer's state
        (`save_optimizer(folder)` writes it, e.g. `rltap.train.gather.save_optimizer_state`)
        and `state` as JSON; it appears whole or not at all."""

        # A state that is not JSON fails here, before anything is written.
        state_json = json.dumps(dict(state), indent=2)
        partial = self.path / f".step-{step}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            model.save_pretrained(partial)
            generation = getattr(model, "generation_config", None)
            if (partial / "adapter_config.json").exists() and generation is not None:
                # peft writes the adapter only: the base model's stop tokens go along.
                generation.save_pretrained(partial)
            tokenizer.save_pretrained(partial)
            save_optimizer(partial / OPTIMIZER)
            (partial / RUN_STATE).write_text(state_json, encoding="utf-8")
            _fsync_tree(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        final = self.path / f"step-{step}"
        if final.exists():
            # Saving a step again: the old folder steps aside first, as a rename cannot replace a
            # folder that holds files (last_checkpoint puts it back if a kill comes in between).
            stale = self.path / f".step-{step}.stale"
            shutil.rmtree(stale, ignore_errors=True)
            final.rename(stale)
            partial.rename(final)
            shutil.rmtree(stale)
        else:
            partial.rename(final)
        return Checkpoint(step=step, path=final, state=json.loads(state_json))

    def checkpoints(self) -> list[Checkpoint]:
        """Every complete checkpoint, by step."""
        found = []
        for step, path in _steps(self.path, _CHECKPOINT):
            state_path = path / RUN_STATE
            if state_path.is_file():
                state = json.loads(state_path.read_text(encoding="utf-8"))
                found.append(Checkpoint(step=step, path=path, state=state))
        return found

    def last_checkpoint(self) -> Checkpoint | None:
        """The highest complete `step-N/`, or None; leftover partial folders are removed."""
        for step, path in _steps(self.path, _STALE):
            final = self.path / f"step-{step}"
            if final.exists():
                shutil.rmtree(path)
            else:
                path.rename(final)
        for _, path in _steps(self.path, _PARTIAL):
            shutil.rmtree(path)
        found = self.checkpoints()
        return found[-1] if found else None

    # -- resume ----------------------------------------------------------------------------------

    def resume_from(self, checkpoint: Checkpoint | None) -> None:
        """Forget everything after `checkpoint` (None: everything) so the resumed run writes each
        later step once: metrics lines, rollout folders, later checkpoints, TensorBoard events."""
        last = checkpoint.step if checkpoint is not None else 0
        # Later checkpoints go first: one left behind by a kill would be resumed from next time.
        for step, path in _steps(self.path, _CHECKPOINT):
            if step > last:
                _discard(path, step)
        kept = [row for row in self.metrics() if row["step"] <= last]
        metrics = self.path / METRICS
        partial = metrics.with_name(f".{METRICS}.partial")
        partial.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
        partial.replace(metrics)
        for folder in ("rollouts", "eval"):
            for step, path in _steps(self.path / folder, _CHECKPOINT):
                if step > last:
                    shutil.rmtree(path)
        # TensorBoard keeps its events; a writer started with purge_step hides those at or after it.
        self.close()
        self._purge_step = last + 1

    def close(self) -> None:
        """Flush and close the TensorBoard writer (the next `log` opens a new one)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
