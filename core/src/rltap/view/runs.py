"""The runs a viewer shows: every capture store under SOURCE, with its training metrics.

SOURCE is a store file, a run folder holding `capture.sqlite`, or a folder of run folders (e.g.
`runs/`, found down to three levels). A run folder of `rltap train` also holds
`metrics.jsonl` (`rltap.train.run_dir`): its `reward_mean` per step is the run's reward curve.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

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
        steps = []
        for line in path.read_bytes().splitlines():
            if line.strip():
                entry = orjson.loads(line)
                keys = ("step", "reward_mean", "reward_std")
                steps.append({key: float(entry.get(key, 0.0)) for key in keys})
        return steps


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
