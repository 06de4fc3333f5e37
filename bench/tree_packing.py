"""Tree packing against one sequence per interaction and one per branch: tokens and forward time.

Three workloads of recorded calls (random token ids; what is measured is the shape):
(a) 10-turn chains: each turn continues the previous call's tokens (a tool result, a reply);
(b) a 3-turn conversation branching 4 ways at every turn (n=4 samples, each continued);
(c) 8-episode groups sharing one prompt (each episode a 2-turn chain of its own).

Each is computed three ways with the same model: `individual` (one forward per interaction over
its prompt + output, the `individual` export), `concat` (one forward per branch, the `concat`
export), `tree` (one packed forward per pack, `rltap.train.packed_logprobs`: every token attends
to its ancestors only). Tokens are the tokens each way feeds the model; times are the best of
`--repeats` forward passes, logprobs included. `max |dlogp|` is the largest difference between
the tree's logprob of a generated token and the individual forward's. Goals: tree / individual
tokens <= 0.2 on (a); tree forward >= 3x faster than individual on (a); tree tokens <= concat
tokens on (b) and (c).

Models: the tiny random Qwen2 of the tests, SmolLM2-135M-Instruct as `rltap_dev.demo_model` converts
it (the folder it cached under ~/.cache/rltap/models; converting needs `make demo`'s packages),
and `qwen0.5b`, a Qwen2.5-0.5B-sized config with random weights (for a GPU:
bench/tree_packing_gpu.sh).

Run: .venv/bin/python bench/tree_packing.py [--models tiny,smollm2] [--repeats 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rltap.record.pack import TreePack, pack_interactions
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.testing.packs import recorded_call
from rltap.train.forward import Attention, packed_logprobs

Calls = list[InteractionWithTokenLogpReward]


class Recorder:
    """Makes recorded calls with random tokens below `vocab` (one seed per workload)."""

    def __init__(self, seed: int, vocab: int) -> None:
        self.rng = random.Random(seed)
        self.vocab = vocab

    def tokens(self, count: int) -> list[int]:
        return [self.rng.randrange(vocab) for vocab in [self.vocab] * count]

    def call(
        self, prompt: list[int], output: int, parent: InteractionWithTokenLogpReward | None = None
    ) -> InteractionWithTokenLogpReward:
        """A call whose prompt is the parent's whole sequence (if any) then `prompt`."""
        return recorded_call(prompt, self.tokens(output), parent)


def chains(make: Recorder, count: int = 2, turns: int = 10) -> list[Calls]:
    """(a): a 64-token first prompt, then turns of 16 prompt + 16 generated tokens."""
    episodes = []
    for _ in range(count):
        calls = [make.call(make.tokens(64), 16)]
        for _ in range(turns - 1):
            calls.append(make.call(make.tokens(16), 16, calls[-1]))
        episodes.append(calls)
    return episodes


def branching(make: Recorder, turns: int = 3, ways: int = 4) -> list[Calls]:
    """(b): a 24-token prompt; every call sampled `ways` times, each sample continued by the
    same 4 prompt tokens (one follow-up question), outputs of 4 tokens."""
    calls: Calls = []
    frontier: list[InteractionWithTokenLogpReward | None] = [None]
    for turn in range(turns):
        grown = []
        for parent in frontier:
            prompt = make.tokens(24 if turn == 0 else 4)
            grown += [make.call(prompt, 4, parent) for _ in range(ways)]
        calls += grown
        frontier = list(grown)
    return [calls]


def groups(make: Recorder, episodes: int = 8) -> list[Calls]:
    """(c): one 64-token prompt for the whole group; each episode 8 generated tokens, a tool
    result of 8 tokens and 8 more generated."""
    prompt = make.tokens(64)
    group: Calls = []
    for _ in range(episodes):
        first = make.call(prompt, 8)
        group += [first, make.call(make.tokens(8), 8, first)]
    return [group]


WORKLOADS: dict[str, Callable[[Recorder], list[Calls]]] = {
    "(a) 10-turn chains": chains,
    "(b) 3 turns x 4 ways": branching,
    "(c) 8-episode group": groups,
}


@dataclass
class Way:
    tokens: int
    seconds: float
    logprobs: dict[tuple[str, int], float]  # generated token (interaction, depth) -> logprob


def sequence_logprobs(model: Any, ids: list[int], device: str) -> np.ndarray:
    """Logprob of each token after the first given those before it (index 0: 0.0)."""
    tensor = torch.tensor([ids], device=device)
    logits = model(input_ids=tensor).logits[0, :-1].float()
    picked = torch.log_softmax(logits, -1).gather(-1, tensor[0, 1:, None])[:, 0]
    return np.concatenate([[0.0], picked.cpu().numpy()])


def timed(run: Callable[[], dict[tuple[str, int], float]], repeats: int, device: str) -> Way:
    best, found = float("inf"), {}
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            found = run()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return Way(0, best, found)


def individual(model: Any, calls: Calls, device: str) -> dict[tuple[str, int], float]:
    found = {}
    for call in calls:
        response = call.model_response
        assert response is not None
        values = sequence_logprobs(model, response.input_tokens + response.output_tokens, device)
        for depth in range(response.input_len, response.input_len + response.output_len):
            found[call.interaction_id, depth] = float(values[depth])
    return found


def concat(model: Any, packs: list[TreePack], device: str) -> dict[tuple[str, int], float]:
    found = {}
    for pack in packs:
        for leaf in pack.leaves:
            values = sequence_logprobs(model, pack.leaf_sequence(leaf).tolist(), device)
            for depth, index in enumerate(leaf.path):
                if pack.loss_mask[index]:
                    key = pack.interaction_ids[pack.interaction_index[index]], depth
                    found[key] = float(values[depth])
    return found


def tree(model: Any, packs: list[TreePack], attention: Attention) -> dict[tuple[str, int], float]:
    found = {}
    for pack in packs:
        values = packed_logprobs(model, pack, attention=attention).cpu().numpy()
        for index in np.flatnonzero(pack.loss_mask):
            key = pack.interaction_ids[pack.interaction_index[index]], int(pack.position_ids[index])
            found[key] = float(values[index])
    return found


def measure(
    model: Any, vocab: int, name: str, repeats: int, device: str, attention: Attention
) -> dict[str, Way]:
    episodes = WORKLOADS[name](Recorder(seed=len(name), vocab=vocab))
    packs = [pack_interactions(calls, {}) for calls in episodes]
    calls = [call for episode in episodes for call in episode]
    ways = {
        "individual": timed(lambda: individual(model, calls, device), repeats, device),
        "concat": timed(lambda: concat(model, packs, device), repeats, device),
        "tree": timed(lambda: tree(model, packs, attention), repeats, device),
    }
    responses = [call.model_response for call in calls if call.model_response is not None]
    ways["individual"].tokens = sum(r.input_len + r.output_len for r in responses)
    ways["concat"].tokens = sum(len(leaf.path) for pack in packs for leaf in pack.leaves)
    ways["tree"].tokens = sum(len(pack) for pack in packs)
    return ways


def smollm2_dir() -> str:
    """SmolLM2 as `rltap_dev.demo_model` builds it; without its packages (the GGUF's package names
    the cached folder), the folder it already cached."""
    from rltap_dev.demo_model import cached_smollm2_dir, default_cache_dir

    try:
        return str(cached_smollm2_dir())
    except FileNotFoundError:
        cached = sorted((default_cache_dir() / "models").glob("smollm2-135m-instruct-*"))
        if not cached:
            raise
        return str(cached[-1])


def load(name: str, device: str, attention: Attention) -> tuple[Any, int]:
    """The model (its attention `attention`) and the vocabulary its random tokens come from."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    if name == "qwen0.5b":
        config = Qwen2Config(  # Qwen2.5-0.5B's shape; random weights are enough for timing
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            vocab_size=151936,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            tie_word_embeddings=True,
        )
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            config, dtype=torch.float32, attn_implementation=attention
        )
    else:
        from rltap.testing.models import cached_tiny_model_dir

        folder = str(cached_tiny_model_dir()) if name == "tiny" else smollm2_dir()
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype="float32", attn_implementation=attention
        )
    model = model.to(device).eval()
    return model, min(int(model.config.vocab_size), 32000)


def report(rows: list[tuple[str, str, dict[str, Way]]], console: Console) -> bool:
    table = Table(title="tokens fed to the model and forward time (best of the repeats)")
    for column in ("model", "workload", "individual", "concat", "tree", "tree/ind", "tree/concat"):
        table.add_column(column, justify="left" if column in ("model", "workload") else "right")
    for column in ("ind s", "concat s", "tree s", "ind/tree time", "max |dlogp|"):
        table.add_column(column, justify="right")
    met = True
    for model, name, ways in rows:
        ind, cat, packed = ways["individual"], ways["concat"], ways["tree"]
        error = max(abs(packed.logprobs[key] - value) for key, value in ind.logprobs.items())
        table.add_row(
            model,
            name,
            *(str(way.tokens) for way in (ind, cat, packed)),
            f"{packed.tokens / ind.tokens:.3f}",
            f"{packed.tokens / cat.tokens:.3f}",
            *(f"{way.seconds:.3f}" for way in (ind, cat, packed)),
            f"{ind.seconds / packed.seconds:.1f}x",
            f"{error:.1e}",
        )
        if name.startswith("(a)"):
            met &= packed.tokens / ind.tokens <= 0.2 and ind.seconds / packed.seconds >= 3
        else:
            met &= packed.tokens <= cat.tokens
    console.print(table)
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,smollm2", help="tiny, smollm2, qwen0.5b")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many (SmolLM2: 1)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--attention", default="sdpa", help="the tree's attention: sdpa, flex_attention (a list)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    console = Console(width=max(Console().width, 150))  # a log file gets the whole table
    rows = []
    runs = [(n, a) for n in args.models.split(",") for a in args.attention.split(",")]
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("forward passes", total=len(runs) * len(WORKLOADS))
        for name, attention in runs:
            model, vocab = load(name, args.device, attention)
            label = name if attention == "sdpa" else f"{name} {attention}"
            repeats = 1 if name == "smollm2" and args.device == "cpu" else args.repeats
            for workload in WORKLOADS:
                progress.update(task, description=f"{label} {workload}")
                ways = measure(model, vocab, workload, repeats, args.device, attention)
                rows.append((label, workload, ways))
                progress.advance(task)
    met = report(rows, console)
    console.print(
        "goals: tree/individual tokens <= 0.2 and tree >= 3x faster than individual on (a); "
        f"tree <= concat tokens on (b), (c): {'met' if met else 'NOT met'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
