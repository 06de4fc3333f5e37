"""Agents run over a dataset through the proxy, and what a rollout leaves behind.

    workflow   RolloutWorkflow, OpenAIProxyWorkflow (and its WorkflowSettings): an agent's
               episode as training data
    runner     `rltap rollout`: rows x group size episodes, `concurrency` at a time
    branches   an episode's branches split as TRL and verl take them (prompt, completion, mask)
    batch      what a rollout hands on in memory: EpisodeData, RolloutBatch (the trainer's)
    files      the run folder's files, written from the batch: trajectories.jsonl,
               batch.safetensors, the ledger
    serving    the engine and an in-process proxy a rollout runs on
    evaluate   `rltap eval` and the held-out evaluation between training steps
    loading    what a user names as an agent (`pkg.module:Name`, `file.py:Name`), loaded
    subproc    agents in a subprocess pool
    progress   the live display of long commands
    ray/       rollout actors on a Ray cluster (`--ray`)

Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap._lazy import lazy_getattr

if TYPE_CHECKING:
    from rltap.rollout.batch import EpisodeData, RolloutBatch, RolloutSummary
    from rltap.rollout.branches import (
        AllEpisodesFailed,
        Branch,
        episode_branches,
        require_branches,
    )
    from rltap.rollout.runner import (
        BATCH,
        LEDGER,
        SUMMARY,
        EpisodeRunner,
        LocalEpisodes,
        load_batch,
        load_rows,
        load_trajectories,
        rollout_rows,
        run_here,
        run_rollout,
        summary_table,
    )
    from rltap.rollout.workflow import (
        Episode,
        EpisodeResult,
        GroupedRolloutWorkflow,
        OpenAIProxyWorkflow,
        RolloutWorkflow,
        WorkflowError,
        WorkflowSettings,
        resolve_workflow,
    )

_BATCH = ("EpisodeData", "RolloutBatch", "RolloutSummary")
_BRANCHES = ("AllEpisodesFailed", "Branch", "episode_branches", "require_branches")
_RUNNER = (
    "BATCH",
    "LEDGER",
    "SUMMARY",
    "EpisodeRunner",
    "LocalEpisodes",
    "load_batch",
    "load_rows",
    "load_trajectories",
    "rollout_rows",
    "run_here",
    "run_rollout",
    "summary_table",
)
_WORKFLOW = (
    "Episode",
    "EpisodeResult",
    "GroupedRolloutWorkflow",
    "OpenAIProxyWorkflow",
    "RolloutWorkflow",
    "WorkflowError",
    "WorkflowSettings",
    "resolve_workflow",
)

__all__ = [
    "BATCH",
    "LEDGER",
    "SUMMARY",
    "AllEpisodesFailed",
    "Branch",
    "Episode",
    "EpisodeData",
    "EpisodeResult",
    "EpisodeRunner",
    "GroupedRolloutWorkflow",
    "LocalEpisodes",
    "OpenAIProxyWorkflow",
    "RolloutBatch",
    "RolloutSummary",
    "RolloutWorkflow",
    "WorkflowError",
    "WorkflowSettings",
    "episode_branches",
    "load_batch",
    "load_rows",
    "load_trajectories",
    "require_branches",
    "resolve_workflow",
    "rollout_rows",
    "run_here",
    "run_rollout",
    "summary_table",
]

__getattr__ = lazy_getattr(
    "rltap.rollout",
    globals(),
    {
        **dict.fromkeys(_BATCH, "rltap.rollout.batch"),
        **dict.fromkeys(_BRANCHES, "rltap.rollout.branches"),
        **dict.fromkeys(_RUNNER, "rltap.rollout.runner"),
        **dict.fromkeys(_WORKFLOW, "rltap.rollout.workflow"),
    },
)
