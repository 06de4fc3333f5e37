"""`rltap rollout`: run an agent over a dataset through the proxy and write the training data.

Each row runs `group_size` episodes (one proxy session each); rows run `concurrency` at a time.
The output folder holds:

- `trajectories.jsonl`: one line per exported interaction (session, group, row, episode,
  interaction id, parent id, messages, output text, token ids, loss mask, logprobs, versions,
  reward);
- `rows.jsonl`: the ledger, one line per finished row, written after its trajectories;
- `batch.safetensors`: every line's tensors right-padded and stacked (the seed's tensor dict);
  with `--style tree`, one token trie per row instead (its episodes' shared prompt once), packed
  again from the row's lines, in the keys of `rltap.train.pack_io.save_packs` (the lines stay
  one per interaction, each its own prompt and output, as style individual's);
- `summary.json`: episodes ok/failed, interactions, tokens, reward mean/std, wall time.

Running again with the same folder resumes: rows in the ledger are skipped, and trajectory lines
of rows that never reached the ledger (an interrupted run) are dropped first, so nothing is
duplicated.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rltap.export import ExportStyle, concat_padded_tensors
from rltap.progress import progress_display
from rltap.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    ModelResponse,
    TokenSequence,
)
from rltap.workflow import Episode, OpenAIProxyWorkflow

__all__ = ["RolloutSummary", "load_rows", "load_trajectories", "run_rollout", "summary_table"]

TRAJECTORIES = "trajectories.jsonl"
LEDGER = "rows.jsonl"
BATCH = "batch.safetensors"
SUMMARY = "summary.json"


@dataclass(slots=True)
class RolloutSummary:
    rows: int = 0
    rows_skipped: int = 0
    episodes_ok: int = 0
    episodes_failed: int = 0
    interactions: int = 0
    generated_tokens: int = 0
    reward_mean: float = 0.0
    reward_std: float = 0.0
    wall_seconds: float = 0.0
    out_dir: str = ""
    errors: list[str] = field(default_factory=list)


def load_rows(path: Path) -> list[Any]:
    """The dataset: one JSON value per non-empty line."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                msg = f"{path}:{number}: not JSON: {exc}"
                raise ValueError(msg) from None
    return rows


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a file this module appends to; a last line without its newline was cut
    short by an interrupted write and is left out."""
    if not path.exists():
        return []
    complete, _, _cut_short = path.read_bytes().rpartition(b"\n")
    return [orjson.loads(line) for line in complete.splitlines() if line.strip()]


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))
    partial.replace(path)


def load_trajectories(out_dir: Path) -> list[dict[str, Any]]:
    return _read_jsonl(out_dir / TRAJECTORIES)


def _finished_rows(out_dir: Path) -> set[int]:
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = _read_jsonl(out_dir / LEDGER)
    _write_jsonl(out_dir / LEDGER, entries)  # without a cut-short line the next append would join
    return {entry["row"] for entry in entries}


def _drop_unfinished(out_dir: Path, finished: set[int]) -> None:
    lines = [line for line in load_trajectories(out_dir) if line["row"] in finished]
    _write_jsonl(out_dir / TRAJECTORIES, lines)


def _line(
    row: int, episode: int, session_id: str, node: InteractionWithTokenLogpReward
) -> dict[str, Any]:
    sequence = node.token_sequence()
    return {
        "row": row,
        "group": row,
        "episode": episode,
        "session": session_id,
        "interaction_id": node.interaction_id,
        "parent_id": node.parent_id,
        "link": None if node.link is None else node.link.value,
        "agent_id": node.agent_id,
        "messages": node.messages,
        "output_text": node.output_text,
        "input_ids": sequence.input_ids,
        "loss_mask": sequence.loss_mask,
        "logprobs": sequence.logprobs,
        "versions": sequence.versions,
        "reward": node.reward,
    }


class _Writer:
    """Appends a finished row's lines, then its ledger entry (the order resume relies on)."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir

    def write_row(self, row: int, episodes: list[Episode]) -> list[dict[str, Any]]:
        lines = [
            _line(row, number, episode.session_id, node)
            for number, episode in enumerate(episodes)
            for node in (episode.interactions or {}).values()
        ]
        with (self.out_dir / TRAJECTORIES).open("ab") as handle:
            handle.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        ok = sum(e.interactions is not None for e in episodes)
        entry = {"row": row, "episodes_ok": ok, "episodes_failed": len(episodes) - ok}
        with (self.out_dir / LEDGER).open("ab") as handle:
            handle.write(orjson.dumps(entry) + b"\n")
        return lines


def write_batch(
    out_dir: Path,
    lines: Iterable[dict[str, Any]],
    pad_token_id: int = 0,
    style: ExportStyle = "individual",
) -> int:
    """`batch.safetensors` from trajectory lines; returns the number of lines (the batch size
    but for style "tree", whose batch is one pack per row)."""
    from safetensors.torch import save_file

    if style == "tree":
        return _write_packs(out_dir, list(lines))
    tensors = []
    for line in lines:
        sequence = TokenSequence(
            input_ids=line["input_ids"],
            loss_mask=line["loss_mask"],
            logprobs=line["logprobs"],
            versions=line["versions"],
        )
        tensors.append(sequence.to_tensor_dict(float(line["reward"] or 0.0)))
    batch = concat_padded_tensors(tensors, pad_token_id=pad_token_id)
    if batch:
        save_file({k: v.contiguous() for k, v in batch.items()}, str(out_dir / BATCH))
    return len(tensors)


def _write_packs(out_dir: Path, lines: list[dict[str, Any]]) -> int:
    from rltap.train.pack import pack_interactions
    from rltap.train.pack_io import save_packs

    rows: dict[int, list[dict[str, Any]]] = {}
    for line in lines:
        rows.setdefault(line["row"], []).append(line)
    packs = []
    for row in sorted(rows):
        rewards = {line["interaction_id"]: float(line["reward"] or 0.0) for line in rows[row]}
        packs.append(pack_interactions(_interactions(rows[row]), rewards))
    if packs:
        save_packs(out_dir / BATCH, packs)
    return len(lines)


def _interactions(lines: list[dict[str, Any]]) -> list[InteractionWithTokenLogpReward]:
    """A row's interactions again, from lines of style individual's (prompt, then output)."""
    built: dict[str, InteractionWithTokenLogpReward] = {}
    for line in lines:
        ids = line["input_ids"]
        start = len(ids) - sum(line["loss_mask"])
        response = ModelResponse(
            input_tokens=ids[:start],
            output_tokens=ids[start:],
            output_logprobs=line["logprobs"][start:],
            output_versions=line["versions"][start:],
        )
        built[line["interaction_id"]] = InteractionWithTokenLogpReward(
            model_response=response,
            # A parent another agent's filter left out: the call starts its own branch.
            parent=built.get(line["parent_id"] or ""),
            link=Link(line["link"]) if line["link"] else None,
            interaction_id=line["interaction_id"],
            messages=line["messages"],
            status=InteractionStatus.COMPLETE,
        )
    return list(built.values())


class _Live:
    """The live counters behind the progress bar."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.tokens = 0
        self.rewards: list[float] = []
        self.started = time.monotonic()

    def describe(self) -> str:
        rate = self.tokens / max(1e-9, time.monotonic() - self.started)
        mean = statistics.fmean(self.rewards) if self.rewards else 0.0
        return f"ok {self.ok} failed {self.failed} | {rate:,.0f} tok/s | reward {mean:+.3f}"


async def run_rollout(
    workflow: OpenAIProxyWorkflow,
    rows: list[Any],
    out_dir: Path,
    *,
    group_size: int = 1,
    concurrency: int = 8,
    pad_token_id: int = 0,
    console: Console | None = None,
    progress: Progress | None = None,
) -> RolloutSummary:
    """Run every row not yet finished in `out_dir`, then rewrite the batch and summary.

    The rows' bar goes on `progress` when given (a caller's live display, e.g. `rltap train`'s),
    and is removed at the end; otherwise on a display of its own."""
    finished = _finished_rows(out_dir)
    _drop_unfinished(out_dir, finished)
    todo = [index for index in range(len(rows)) if index not in finished]
    writer = _Writer(out_dir)
    live = _Live()
    summary = RolloutSummary(rows=len(rows), rows_skipped=len(rows) - len(todo))
    semaphore = asyncio.Semaphore(max(1, concurrency))
    with contextlib.ExitStack() as stack:
        own = progress is None
        if progress is None:
            progress = stack.enter_context(progress_display(console or Console(stderr=True)))
        task = progress.add_task("rollout rows", total=len(todo), live=live.describe())
        if not own:
            stack.callback(progress.remove_task, task)

        async def one_row(index: int) -> None:
            async with semaphore:
                episodes = await asyncio.gather(
                    *(
                        workflow.run_episode(rows[index], task_id=f"row-{index}")
                        for _ in range(group_size)
                    )
                )
            lines = writer.write_row(index, list(episodes))
            live.ok += sum(e.interactions is not None for e in episodes)
            live.failed += sum(e.interactions is None for e in episodes)
            summary.errors.extend(e.error for e in episodes if e.error)
            live.tokens += sum(sum(line["loss_mask"]) for line in lines)
            live.rewards.extend(float(line["reward"] or 0.0) for line in lines)
            progress.update(task, advance=1, live=live.describe())

        await asyncio.gather(*(one_row(index) for index in todo))
    _summarise(summary, out_dir, live, pad_token_id, workflow.style)
    return summary


def _summarise(
    summary: RolloutSummary, out_dir: Path, live: _Live, pad_token_id: int, style: ExportStyle
) -> None:
    lines = load_trajectories(out_dir)
    ledger = _read_jsonl(out_dir / LEDGER)
    summary.episodes_ok = sum(entry["episodes_ok"] for entry in ledger)
    summary.episodes_failed = sum(entry["episodes_failed"] for entry in ledger)
    summary.interactions = write_batch(out_dir, lines, pad_token_id, style)
    summary.generated_tokens = sum(sum(line["loss_mask"]) for line in lines)
    rewards = [float(line["reward"] or 0.0) for line in lines]
    summary.reward_mean = statistics.fmean(rewards) if rewards else 0.0
    summary.reward_std = statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
    summary.wall_seconds = time.monotonic() - live.started
    summary.out_dir = str(out_dir)
    (out_dir / SUMMARY).write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))


def summary_table(summaries: dict[str, RolloutSummary]) -> Table:
    """One row per run: what `rltap rollout` and `rltap demo` print at the end."""
    table = Table(title="rltap rollout")
    numeric = ("episodes ok", "failed", "interactions", "generated tokens", "reward mean")
    for column in ("run", *numeric, "reward std", "wall s", "files"):
        table.add_column(column, justify="left" if column in ("run", "files") else "right")
    for name, s in summaries.items():
        table.add_row(
            name, str(s.episodes_ok), str(s.episodes_failed), str(s.interactions),
            str(s.generated_tokens), f"{s.reward_mean:.3f}", f"{s.reward_std:.3f}",
            f"{s.wall_seconds:.1f}", s.out_dir,
        )  # fmt: skip
    return table


def load_batch(out_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(out_dir / BATCH))


async def _rollout_from_args(args: Any, console: Console) -> RolloutSummary:
    from rltap.workflow import resolve_workflow

    if args.group_size < 1 or args.concurrency < 1:
        raise SystemExit("--group-size and --concurrency must be at least 1")
    rows = load_rows(Path(args.data))

    async def run(proxy_url: str, admin_key: str, pad_token_id: int) -> RolloutSummary:
        workflow = resolve_workflow(
            args.agent,
            proxy_addr=proxy_url,
            admin_key=admin_key,
            mode=args.mode,
            discount=args.discount,
            style=args.style,
            link_factors=dict(args.link_factors) if args.link_factors else None,
            agents=args.agents,
            episode_timeout=args.episode_timeout,
            subproc_workers=args.concurrency * args.group_size,  # every episode in flight
        )
        if not isinstance(workflow, OpenAIProxyWorkflow):
            msg = f"{args.agent} must be an agent with run(data, **kwargs), not a RolloutWorkflow"
            raise SystemExit(msg)
        try:
            return await run_rollout(
                workflow,
                rows,
                Path(args.out),
                group_size=args.group_size,
                concurrency=args.concurrency,
                pad_token_id=pad_token_id,
                console=console,
            )
        finally:
            await workflow.aclose()

    if args.proxy:
        if not args.admin_key:
            raise SystemExit("--proxy needs --admin-key (or RLTAP_ADMIN_KEY)")
        return await run(args.proxy, args.admin_key, 0)
    import secrets

    from rltap.proxy import ProxyServer, create_app, serve_config

    admin_key = secrets.token_urlsafe(24)
    setup = serve_config(args, admin_key)
    pad = setup.renderer.tokenizer.pad_token_id or 0
    async with ProxyServer(create_app(setup.engine, setup.renderer, setup.config)) as server:
        return await run(server.url, admin_key, int(pad))


def rollout_command(args: Any) -> int:
    """`rltap rollout`: prints the summary table; exit 1 if every episode failed."""
    import os

    if args.admin_key is None:
        args.admin_key = os.environ.get("RLTAP_ADMIN_KEY")
    console = Console(stderr=True)
    summary = asyncio.run(_rollout_from_args(args, console))
    Console().print(summary_table({Path(args.agent).name: summary}))
    if summary.errors:
        console.print(f"[yellow]{len(summary.errors)} episodes failed; first: {summary.errors[0]}")
    return 1 if summary.episodes_ok == 0 and summary.episodes_failed > 0 else 0
