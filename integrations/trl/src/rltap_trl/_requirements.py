"""The TRL versions this plugin is tested on, declared once (pyproject.toml repeats the range).

One minor release: TRL marks `rollout_func` experimental, and the batch layout rltap_trl reads
(each prompt repeated `num_generations` times, one row back per prompt) is 1.16's.
"""

from __future__ import annotations

__all__ = ["TRL_REQUIREMENT"]

TRL_REQUIREMENT = "trl>=1.16,<1.17"
