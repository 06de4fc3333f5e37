"""examples/trl_langchain's CPU command: its train.py trains two steps on the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltap.rollout.workflow import load_object

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trl_langchain"


@pytest.mark.slow
def test_the_examples_cpu_command_trains(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = load_object(f"{EXAMPLE / 'train.py'}:main")
    argv = ["--model", str(tiny_model_dir), "--cpu", "--max-steps", "2", "--batch-size", "4"]
    argv += ["--num-generations", "2", "--max-tokens", "16", "--out", str(tmp_path / "out")]
    assert main(argv) == {"steps": 2, "out": str(tmp_path / "out")}
    assert (tmp_path / "out" / "model.safetensors").is_file()
    printed = capsys.readouterr().out
    assert "step 1: reward " in printed
    assert "step 2: reward " in printed
