"""What a rollout hands on in memory: the hop from the rollout to the trainer, as verl hands its
`DataProto`. The run folder's files (`rltap.rollout.files`) are written from these objects for
resume and inspection; nothing on the way to the trainer reads them back.

    EpisodeData    one episode: its trajectory lines and, with style tree, its pack as the proxy
                   exported it (decoded once); what a Ray rollout actor hands the driver
    RolloutBatch   a rollout's finished rows: every line, one pack per row (style tree: the
                   row's episodes merged into one trie), the ledger and the summary; what
                   `run_rollout` returns and `rltap train` trains on
    RolloutSummary episodes ok/failed/retried, interactions, tokens, rewards, wall time
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rltap.record.pack import TreePack, merge_tries
from rltap.tree.export import ExportStyle, padded_batch

if TYPE_CHECKING:
    import torch

__all__ = ["EpisodeData", "RolloutBatch", "RolloutSummary", "row_pack"]


@dataclass(slots=True)
class RolloutSummary:
    rows: int = 0
    rows_skipped: int = 0
    episodes_ok: int = 0
    episodes_failed: int = 0
    episodes_retried: int = 0
    interactions: int = 0
    generated_tokens: int = 0
    reward_mean: float = 0.0
    reward_std: float = 0.0
    wall_seconds: float = 0.0
    out_dir: str = ""
    errors: list[str] = field(default_factory=list)


@dataclass(slots=True)
class EpisodeData:
    """One episode as the rollout hands it on: its trajectory lines (one per exported
    interaction, `rltap.rollout.files`), and with style tree its session's pack, the proxy's
    export as decoded once; or why it failed (`lines` None). `retries` counts the times it ran
    again after the worker running it died."""

    session_id: str
    lines: list[dict[str, Any]] | None
    pack: TreePack | None = None
    error: str | None = None
    retries: int = 0


def row_pack(episodes: Sequence[EpisodeData]) -> TreePack | None:
    """A row's episodes as one trie (`merge_tries`: the prompt they share once); a single
    episode's pack as exported. None when no episode has an interaction (or none is of style
    tree)."""
    packs = [e.pack for e in episodes if e.pack is not None and e.pack.interaction_ids]
    if not packs:
        return None
    return packs[0] if len(packs) == 1 else merge_tries(packs)


@dataclass(slots=True)
class RolloutBatch:
    """A rollout's finished rows, in memory (see the module).

    `lines` are in the order of `trajectories.jsonl` (a row's as it finished), `ledger` holds
    `rows.jsonl`'s entries, `row_packs` each row's trie by dataset row (style tree). A resumed
    rollout starts from the rows its folder holds (`rltap.rollout.files.read_rollout`).
    """

    style: ExportStyle
    lines: list[dict[str, Any]] = field(default_factory=list)
    row_packs: dict[int, TreePack] = field(default_factory=dict)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    summary: RolloutSummary = field(default_factory=RolloutSummary)

    @property
    def packs(self) -> list[TreePack]:
        """Style tree: one pack per row with interactions, by row: what the trainer steps on."""
        return [self.row_packs[row] for row in sorted(self.row_packs)]

    @property
    def finished(self) -> set[int]:
        """The rows in the ledger."""
        return {entry["row"] for entry in self.ledger}

    def add_row(
        self, row: int, episodes: Sequence[EpisodeData]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Take a finished row's episodes; returns its lines and its ledger entry (what the
        files get)."""
        lines = [line for episode in episodes for line in episode.lines or ()]
        ok = sum(e.lines is not None for e in episodes)
        entry = {
            "row": row,
            "episodes_ok": ok,
            "episodes_failed": len(episodes) - ok,
            "episodes_retried": sum(e.retries for e in episodes),
        }
        self.lines.extend(lines)
        self.ledger.append(entry)
        if self.style == "tree" and (pack := row_pack(episodes)) is not None:
            self.row_packs[row] = pack
        return lines, entry

    def tensors(self, pad_token_id: int = 0) -> dict[str, torch.Tensor]:
        """Styles but tree: every line's tensors right-padded and stacked (empty: no lines)."""
        return padded_batch(self.lines, pad_token_id)

    def summarise(self, summary: RolloutSummary) -> RolloutSummary:
        """`summary` (rows, errors, wall time and folder set by the caller) with this batch's
        counts and rewards; it is the batch's summary from then on."""
        summary.episodes_ok = sum(entry["episodes_ok"] for entry in self.ledger)
        summary.episodes_failed = sum(entry["episodes_failed"] for entry in self.ledger)
        summary.episodes_retried = sum(entry.get("episodes_retried", 0) for entry in self.ledger)
        summary.interactions = len(self.lines)
        summary.generated_tokens = sum(sum(line["loss_mask"]) for line in self.lines)
        rewards = [float(line["reward"] or 0.0) for line in self.lines]
        summary.reward_mean = statistics.fmean(rewards) if rewards else 0.0
        summary.reward_std = statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
        self.summary = summary
        return summary
