"""How one episode's calls sample, set by whoever runs the episode rather than by the agent.

`EpisodeSampling` travels in `POST /rl/start_session` (`sampling`) and is kept on the session:

- `temperature` replaces each call's own temperature: `rltap train --temperature` must be the
  temperature the engine sampled with (the recorded logprobs are log_softmax(logits / T), the
  trainer divides by the same T), and `rltap eval --greedy` must decode greedily whatever
  temperature the agent's code asks for;
- `seed` seeds every call that sets no seed of its own: call k of the session with
  `derive_seed(seed, k)`, so a rerun samples the same tokens whatever order the episodes'
  requests reach the engine in (the embedded engine samples each request with its own seeded
  generator).

`derive_seed(base, row, episode)` is how a rollout gives each episode its own seed from one
`--seed`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

from rltap.record.errors import InvalidRequest

__all__ = ["MAX_SEED", "EpisodeSampling", "derive_seed"]

# Seeds stay below 2**63: torch, vLLM and SGLang all take a signed 64-bit seed.
MAX_SEED = 2**63 - 1


def derive_seed(base: int, *parts: int) -> int:
    """A seed in [0, MAX_SEED] from `base` and `parts`; a hash, so neighbouring inputs give
    unrelated streams (seed + 1 would share most of its draws with seed in some engines)."""
    text = ":".join(str(part) for part in (base, *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") & MAX_SEED


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeSampling:
    """An episode's sampling settings (None: each call's own, else the session's default).

    Usage:
        EpisodeSampling(seed=derive_seed(0, row, episode), temperature=0.0)
    """

    seed: int | None = None
    temperature: float | None = None

    def __post_init__(self) -> None:
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            msg = f"seed must be in [0, 2**63 - 1], got {self.seed}"
            raise InvalidRequest(msg, param="sampling.seed")
        if self.temperature is not None and not (
            math.isfinite(self.temperature) and self.temperature >= 0
        ):
            msg = f"temperature must be a finite number >= 0, got {self.temperature}"
            raise InvalidRequest(msg, param="sampling.temperature")

    def call_seed(self, call: int, own: int | None = None) -> int | None:
        """The seed of the session's call number `call` (0-based): its `own`, else derived."""
        if own is not None or self.seed is None:
            return own
        return derive_seed(self.seed, call)

    def call_temperature(self, own: float | None) -> float | None:
        """The temperature of a call that asks for `own`: this one's, if set."""
        return own if self.temperature is None else self.temperature

    def for_episode(self, row: int, episode: int) -> EpisodeSampling:
        """These settings for episode `episode` of dataset row `row`: its own seed."""
        if self.seed is None:
            return self
        return replace(self, seed=derive_seed(self.seed, row, episode))
