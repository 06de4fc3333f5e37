"""The viewer's runs and server, shared by the API and the browser tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from capture_run import Recorded
from viewer_runs import make_runs, serving


@pytest.fixture(scope="session")
def viewer_url(recorded: Recorded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    runs = make_runs(recorded.store, tmp_path_factory.mktemp("runs"))
    with serving(runs) as url:
        yield url
