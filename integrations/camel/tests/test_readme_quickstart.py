"""The README's CAMEL quickstart, run as written against a real proxy.

`tests/e2e/test_readme.py` runs the README's other blocks; this one needs the framework, so it
runs here, in the framework's own venv. The only edit is the proxy's address.
"""

from __future__ import annotations

from pathlib import Path

from rltap.testing import RunningProxy
from rltap.testing.harness import check_episode
from rltap_dev.readme import run_quickstart

README = Path(__file__).resolve().parents[3] / "README.md"


async def test_readme_quickstart_runs_one_episode(proxy: RunningProxy) -> None:
    episode = await run_quickstart(README, "rltap_camel", proxy)

    assert episode.error is None
    # The scripted engine calls add(2, 2), then answers "Final answer: 4": reward 1.0.
    check_episode(episode.interactions, expected_interactions=2, expected_reward=1.0, discount=1)
