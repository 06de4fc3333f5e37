"""Write the arithmetic tasks' training and held-out rows (`train.jsonl`, `eval.jsonl`) into the
LangChain, Agents SDK and CAMEL examples: `python examples/make_arithmetic_splits.py`.

Sums and differences of two numbers from 2 to 20 (differences never negative), drawn with a
fixed seed, so the files are the same on every machine. No question of the held-out split is in
the training split. The CAMEL example gets the same numbers as one-sentence word problems
(its rows are `{"task", "answer"}`, the others' `{"question", "answer"}`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
TRAIN_ROWS = 48
EVAL_ROWS = 16
SEED = 20261202
WORD_PROBLEMS = {
    "+": "Ann has {a} apples and buys {b} more. How many apples does she have now?",
    "-": "Tom has {a} marbles and gives {b} away. How many marbles does he have left?",
}


def problems(
    count: int, rng: random.Random, seen: set[tuple[int, str, int]]
) -> list[tuple[int, str, int]]:
    """`count` distinct (a, op, b) not in `seen` (added to it)."""
    drawn: list[tuple[int, str, int]] = []
    while len(drawn) < count:
        a, b, op = rng.randint(2, 20), rng.randint(2, 20), rng.choice("+-")
        if op == "-" and b > a:
            a, b = b, a
        if (a, op, b) not in seen:
            seen.add((a, op, b))
            drawn.append((a, op, b))
    return drawn


def rows(drawn: list[tuple[int, str, int]], *, word_problems: bool) -> list[dict[str, str]]:
    out = []
    for a, op, b in drawn:
        answer = str(a + b if op == "+" else a - b)
        if word_problems:
            out.append({"task": WORD_PROBLEMS[op].format(a=a, b=b), "answer": answer})
        else:
            out.append({"question": f"What is {a} {op} {b}?", "answer": answer})
    return out


def main() -> None:
    rng = random.Random(SEED)
    seen: set[tuple[int, str, int]] = set()
    splits = {"eval": problems(EVAL_ROWS, rng, seen), "train": problems(TRAIN_ROWS, rng, seen)}
    for folder, word_problems in (
        ("langchain_math", False),
        ("openai_agents_calculator", False),
        ("camel_roleplay", True),
    ):
        for split, drawn in splits.items():
            lines = [json.dumps(row) for row in rows(drawn, word_problems=word_problems)]
            (EXAMPLES / folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
