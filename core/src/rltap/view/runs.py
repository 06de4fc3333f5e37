"""The runs a viewer shows: every capture store under SOURCE, with its training metrics.

SOURCE is a store file, a run folder holding `capture.sqlite`, or a folder of run folders (e.g.
`runs/`, found down to three levels). A run folder of `rltap train` also holds
`metrics.jsonl` (`rltap.train.run_dir`): its `reward_mean` per step is the run's reward curve.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rltap.store.schema import STORE_FILE

__all__ = ["Run", "find_runs"]

_DEPTH = 3


@dataclass(frozen=True, slots=True)
class Run:
    name: str  # the folder's path below SOURCE ("." for SOURCE itself)
    store: Path

    @property
    def folder(self) -> Path:
        return self.store.parent

    def steps(self) -> list[dict[str, float]]:
        """`{"step", "reward_mean", "reward_std"}` per step (none but in `rltap train`'s)."""
        path = self.folder / "metrics.jsonl"
        if not path.is_file():
            return []
        # Read as `RunDir.metrics` reads it: json (a logged NaN is `NaN`, which orjson refuses),
        # a last line without its newline left out (a run writing it right now).
        complete, _, _cut_short = path.read_text(encoding="utf-8").rpartition("\n")
        keys = ("step", "reward_mean", "reward_std")
        entries = [json.loads(line) for line in complete.splitlines() if line.strip()]
        return [{key: float(entry.get(key, 0.0)) for key in keys} for entry in entries]


def find_runs(source: Path) -> list[Run]:
    """The runs under `source` (FileNotFoundError naming it when there is none)."""
    source = Path(source)
    if source.is_file():
        return [Run(source.stem, source)]
    stores = []
    if source.is_dir():
        for depth in range(_DEPTH + 1):
            stores.extend(sorted(source.glob("/".join(["*"] * depth + [STORE_FILE]))))
    if not stores:
        msg = f"no capture store ({STORE_FILE}) in {source} or below it"
        raise FileNotFoundError(msg)
    return [Run(str(store.parent.relative_to(source)), store) for store in stores]
