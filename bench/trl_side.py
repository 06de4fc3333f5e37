"""TRL's side of bench/trl_compare.py, run by it in TRL's own venv (`.venv-trl`): GRPOTrainer on
bench/trl_task.py's task with transformers generation (use_vllm=False), beta 0, one update per
step, fp32 on CPU with one torch thread; a JSON line of per-step seconds (and the share spent in
`model.generate`), reward and completion length goes to --out.

    .venv-trl/bin/python bench/trl_side.py --model DIR --rows 4 --group-size 4 --steps 4 \\
        --max-tokens 16 --lr 1e-4 --seed 0 --out trl.json
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl_task import rows, vowel_share


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    for name, default in (("rows", 4), ("group-size", 4), ("steps", 4), ("max-tokens", 16)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    return parser.parse_args()


class StepLog(TrainerCallback):  # type: ignore[misc]
    """Each optimizer step's wall seconds, its seconds in `model.generate`, and TRL's logs."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.generate_seconds = 0.0
        self._began = 0.0

    def timed(self, generate: Any) -> Any:
        @functools.wraps(generate)
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                self.generate_seconds += time.perf_counter() - started

        return run

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.generate_seconds = 0.0
        self._began = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        seconds = time.perf_counter() - self._began
        self.steps.append({"seconds": seconds, "rollout_seconds": self.generate_seconds})

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and "reward" in logs and self.steps:
            self.steps[-1]["reward"] = float(logs["reward"])
            self.steps[-1]["mean_length"] = float(logs.get("completions/mean_length", 0.0))


def reward(completions: list[Any], **_: Any) -> list[float]:
    return [vowel_share(c[0]["content"] if isinstance(c, list) else c) for c in completions]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    data = [
        {"prompt": [{"role": "user", "content": row["prompt"]}]}
        for row in rows(args.rows * args.steps, args.max_tokens)
    ]
    log = StepLog()
    model.generate = log.timed(model.generate)
    with tempfile.TemporaryDirectory() as scratch:
        config = GRPOConfig(
            output_dir=scratch, per_device_train_batch_size=args.rows * args.group_size,
            gradient_accumulation_steps=1, num_generations=args.group_size,
            max_completion_length=args.max_tokens, learning_rate=args.lr,
            lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
            beta=0.0, num_iterations=1, temperature=1.0, top_p=1.0, top_k=0, use_vllm=False,
            max_steps=args.steps, logging_steps=1, save_strategy="no", report_to="none",
            bf16=False, fp16=False, use_cpu=True, seed=args.seed, shuffle_dataset=False,
            dataloader_num_workers=0, disable_tqdm=True,
        )  # fmt: skip
        trainer = GRPOTrainer(
            model=model, reward_funcs=reward, args=config,
            train_dataset=Dataset.from_list(data), processing_class=tokenizer, callbacks=[log],
        )  # fmt: skip
        torch.set_num_threads(1)
        loaded = time.perf_counter() - started
        trainer.train()
    result = {"load_seconds": loaded, "threads": torch.get_num_threads(), "steps": log.steps}
    Path(args.out).write_text(json.dumps(result) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
