"""The Ray tests' fixtures: one local cluster (2 CPUs: the rollout actors take 1 each) for the
module that uses it (test_ray.py; a module runs on one pytest-xdist worker, so one cluster),
the agents named by path, and instant vLLM servers (`rltap.testing.fakes.vllm`).

Starting the cluster takes seconds; every test's actors come and go on it. Drivers run in this
process (already connected, so `--ray ADDRESS` is a no-op) or as a `rltap` process joining by
address.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray
from process_testing import fake_vllm_process

AGENTS_FILE = Path(__file__).parent / "agents" / "ray_agents.py"


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """The GCS address of a local cluster started here (what `--ray ADDRESS` takes)."""
    # "local": a cluster of its own, even if another one runs on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_agent() -> Callable[[str], str]:
    def spec(name: str) -> str:
        return f"{AGENTS_FILE}:{name}"

    return spec


def _instant_vllm(record: Path | None) -> contextlib.AbstractContextManager[str]:
    """`rltap.testing.fakes.vllm` (instant replies) as a process of its own; with `record`, its
    development API too, logging those requests there. Yields its URL once it answers."""
    return fake_vllm_process() if record is None else fake_vllm_process("--record", str(record))


@pytest.fixture
def instant_vllm() -> Callable[[Path | None], contextlib.AbstractContextManager[str]]:
    return _instant_vllm
