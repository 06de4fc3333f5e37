"""Train a model with TRL's GRPOTrainer on examples/langchain_math's LangChain agent, via rltap.

TRL gives each dataset row's `prompt` to rollout_func; here a row's prompt is the agent's own
data row ({"question", "answer"}). The agent's episodes run through rltap's proxy in front of
the policy TRL trains (the trainer's own model in process, or the vLLM server it syncs into with
--use-vllm) and come back as TRL's rows; `rltap_reward` hands TRL the reward each episode
earned.

    python examples/trl_langchain/train.py --model runs/tiny-model --cpu --max-steps 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from rltap.rollout.workflow import load_object
from rltap_trl import AgentRollout, rltap_reward

EXAMPLES = Path(__file__).resolve().parent.parent
AGENT = f"{EXAMPLES / 'langchain_math' / 'agent.py'}:ShapedAgent"
DATA = EXAMPLES / "langchain_math" / "train.jsonl"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder (or a Hub id on GPU nodes)")
    parser.add_argument(
        "--agent", default=AGENT, help="path/to/agent.py:Name (default: %(default)s)"
    )
    parser.add_argument("--data", type=Path, default=DATA, help="JSON lines, one agent row each")
    parser.add_argument("--out", default="runs/trl_langchain")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8, help="rows per device and step")
    parser.add_argument("--num-generations", type=int, default=4, help="episodes per prompt")
    parser.add_argument("--max-tokens", type=int, default=128, help="per call (the agent's)")
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--cpu", action="store_true", help="train on CPU in fp32")
    parser.add_argument("--use-vllm", action="store_true", help="generate on `trl vllm-serve`")
    parser.add_argument("--vllm-server-base-url", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list([{"prompt": row} for row in rows])
    config = GRPOConfig(
        output_dir=args.out,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_tokens,
        learning_rate=args.learning_rate,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=args.cpu,
        bf16=not args.cpu,
        use_vllm=args.use_vllm,
        vllm_mode="server",
        vllm_server_base_url=args.vllm_server_base_url,
    )
    agent = load_object(args.agent)(chat_kwargs={"max_tokens": args.max_tokens})
    dtype = "float32" if args.cpu else "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    with AgentRollout(agent) as rollout:
        trainer = GRPOTrainer(
            model=model,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            reward_funcs=rltap_reward,
            rollout_func=rollout,
        )
        trainer.train()
    trainer.save_model(args.out)
    steps = [entry for entry in trainer.state.log_history if "reward" in entry]
    for entry in steps:
        print(f"step {entry['step']}: reward {entry['reward']:.3f} (std {entry['reward_std']:.3f})")
    return {"steps": len(steps), "out": args.out}


if __name__ == "__main__":
    main()
