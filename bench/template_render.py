"""Time per chat-template render: rltap's CompiledChatTemplate against transformers' own function.

`transformers.utils.chat_template_utils.render_jinja_template` is what `apply_chat_template`
renders with; `rltap.chat.template_render.CompiledChatTemplate` is rltap's copy of that Jinja
setup without the per-call rebuilding of the messages as plain data. Both render the same
conversation (system prompt, two tools, user turns, a tool call, its result, replies) with the
Qwen tokenizer's template the tests use, and Qwen3's published one; a render whose texts differ
stops the run. The two are timed (CPU time) in alternating rounds so both see the same load.

What a render costs per proxy call: a call renders once (concat mode: the window of the system
message, the last covered message and the new ones; hf mode: the whole conversation); the second
render of a concat call, the covered part alone, is remembered per message shape.

Run: .venv/bin/python bench/template_render.py [--rounds 30] [--renders 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import render_jinja_template

from rltap.chat.template_render import CompiledChatTemplate
from rltap.testing.models import cached_qwen_tokenizer_dir

QWEN3_TEMPLATE = Path(__file__).parent.parent / "tests/chat/data/qwen3_chat_template.jinja"

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {arg: {"type": "string"}}},
        },
    }
    for name, description, arg in (
        ("get_weather", "Current weather of a city.", "city"),
        ("get_time", "Local time of a timezone.", "tz"),
    )
]


def _conversation(turns: int) -> list[dict[str, Any]]:
    """`turns` rounds of: question, tool call, tool result, answer (as the proxy passes them)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
    for turn in range(turns):
        call = {"name": "get_weather", "arguments": f'{{"city": "Paris {turn}"}}'}
        messages += [
            {"role": "user", "content": f"{turn}: what is the weather in Paris today?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"call_{turn}", "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "sunny, 21 C"},
            {"role": "assistant", "content": f"It is sunny in Paris ({turn})."},
        ]
    return messages


def _ms_per_render(render: Callable[[], str], renders: int) -> float:
    # CPU time of this thread: on a shared host, wall time also counts waiting for a core.
    started = time.thread_time()
    for _ in range(renders):
        render()
    return (time.thread_time() - started) / renders * 1e3


def _compare(
    tokenizer: Any, template: str, messages: list[dict[str, Any]], rounds: int, renders: int
) -> tuple[float, float]:
    """Median ms per render of (rltap's copy, transformers' function) over alternating rounds."""
    compiled = CompiledChatTemplate(tokenizer, template)
    special = dict(tokenizer.special_tokens_map)

    def copy() -> str:
        return compiled.render(
            messages, tools=TOOLS, add_generation_prompt=True, template_kwargs=None
        )

    def library() -> str:
        # Annotated `-> str`, it returns (texts, generation indices), one text per conversation.
        result: Any = render_jinja_template(
            [messages],
            tools=list(TOOLS),
            chat_template=template,
            add_generation_prompt=True,
            **special,
        )
        return str(result[0][0])

    if copy() != library():
        msg = "the two renderings differ: the timings would not compare the same work"
        raise SystemExit(msg)
    copies: list[float] = []
    libraries: list[float] = []
    for _ in range(rounds):
        copies.append(_ms_per_render(copy, renders))
        libraries.append(_ms_per_render(library, renders))
    return statistics.median(copies), statistics.median(libraries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--renders", type=int, default=200, help="renders per round and side")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(str(cached_qwen_tokenizer_dir()))
    templates = {
        "rltap Qwen (tests)": str(tokenizer.chat_template),
        "Qwen3 published": QWEN3_TEMPLATE.read_text(encoding="utf-8"),
    }
    full = _conversation(8)
    window = [full[0], *full[-4:]]  # a concat call's window: system, last covered, new ones
    table = Table(title=f"CPU ms per render, median of {args.rounds} rounds x {args.renders}")
    for column in ("template", "messages", "rltap copy", "transformers", "ratio", "added ms"):
        table.add_column(column, justify="left" if column == "template" else "right")
    for name, template in templates.items():
        for messages in (window, full):
            ours, theirs = _compare(tokenizer, template, messages, args.rounds, args.renders)
            table.add_row(
                name,
                str(len(messages)),
                f"{ours:.4f}",
                f"{theirs:.4f}",
                f"{theirs / ours:.2f}x",
                f"{theirs - ours:+.4f}",
            )
    console = Console()
    console.print(table)
    console.print(
        "added ms: what transformers' function would add per proxy call (one render a call); "
        "the hop budget is 1 ms added per call"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
