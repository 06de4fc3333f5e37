"""`rltap view SOURCE` refuses a SOURCE without a capture store as a usage error, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltap.cli.commands import main


def test_a_folder_without_a_store_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["view", str(tmp_path)])
    assert exited.value.code == 2
    said = capsys.readouterr()
    assert said.err == f"rltap view: no capture store (capture.sqlite) in {tmp_path} or below it\n"
    assert said.out == ""  # no server was started
