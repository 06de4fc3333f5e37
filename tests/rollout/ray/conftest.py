"""The Ray tests' fixtures: one local cluster (2 CPUs: the rollout actors take 1 each) for the
module that uses it (test_ray.py; a module runs on one pytest-xdist worker, so one cluster),
the agents named by path, and instant vLLM servers (`rltap.testing.fakes.vllm`).

Starting the cluster takes seconds; every test's actors come and go on it. Drivers run in this
process (already connected, so `--ray ADDRESS` is a no-op) or as a `rltap` process joining by
address.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import ray

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


@contextlib.contextmanager
def _instant_vllm(record: Path | None) -> Iterator[str]:
    """`rltap.testing.fakes.vllm` (instant replies) as a process of its own; with `record`, its
    development API too, logging those requests there. Yields its URL once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "rltap.testing.fakes.vllm", "--port", str(port)]
    server = subprocess.Popen(command if record is None else [*command, "--record", str(record)])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            assert server.poll() is None, "the fake vLLM server exited"
            assert time.monotonic() < deadline, "the fake vLLM server did not come up"
            time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def instant_vllm() -> Callable[[Path | None], contextlib.AbstractContextManager[str]]:
    return _instant_vllm
