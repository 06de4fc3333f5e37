"""`rltap demo --tiny` end to end: the three framework examples, each in its own venv, the files
every run leaves, and the training steps after them.

The framework venvs are the nox integration sessions' (`.nox/integration-framework-<name>/`).
`make test` runs this suite before `make integrations`, so on a fresh clone they do not exist
yet: the test brings them up to date itself with `nox --install-only` (uv links packages from its
cache; a few seconds per venv once made), and the `integrations` step then reuses them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rltap.rollout.runner import load_batch, load_trajectories
from rltap_dev.demo import EXAMPLES
from rltap_dev.demo_train import TRAIN_STEPS_TINY

REPO_ROOT = Path(__file__).resolve().parents[2]
ROWS = 1
GROUP_SIZE = 2


def _env() -> dict[str, str]:
    # nox finds uv, and the demo its console script, next to this interpreter.
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


@pytest.fixture(scope="module")
def framework_venvs() -> None:
    """Create or update the three integration venvs (what `make demo-venvs` does)."""
    for example in EXAMPLES:
        session = f"integration(framework='{example.framework}')"
        result = subprocess.run(
            [sys.executable, "-m", "nox", "--install-only", "-s", session],
            cwd=REPO_ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        assert result.returncode == 0, f"nox --install-only -s {session}:\n{result.stderr[-4000:]}"


@pytest.mark.slow
def test_demo_tiny_runs_every_framework(framework_venvs: None, tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "rltap.cli", "demo", "--tiny",
        "--rows", str(ROWS), "--group-size", str(GROUP_SIZE),
        "--default-max-tokens", "24", "--out", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env={**_env(), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-6000:]}"
    assert "rltap demo" in result.stdout
    (run_dir,) = tmp_path.glob("demo-*")
    for example in EXAMPLES:
        out = run_dir / example.framework
        assert example.framework in result.stdout
        summary = json.loads((out / "summary.json").read_text())
        lines = load_trajectories(out)
        batch = load_batch(out)
        assert summary["episodes_ok"] == ROWS * GROUP_SIZE, (example.framework, summary)
        assert summary["episodes_failed"] == 0, (example.framework, summary)
        assert summary["interactions"] == len(lines) > 0, (example.framework, summary)
        assert {line["episode"] for line in lines} == set(range(GROUP_SIZE))
        assert batch["input_ids"].shape[0] == len(lines)
        assert all(sum(line["loss_mask"]) > 0 for line in lines)
        for line in lines:
            assert len(line["input_ids"]) == len(line["loss_mask"]) == len(line["logprobs"])
    train = run_dir / "train"
    metrics = [json.loads(line) for line in (train / "metrics.jsonl").read_text().splitlines()]
    updates = [m for m in metrics if m["step"] > 0]
    assert [m["version"] for m in updates] == list(range(1, TRAIN_STEPS_TINY + 1))
    assert all(m["tokens"] > 0 for m in updates), metrics
    # The held-out reward before the first step and after each.
    evaluated = [m["step"] for m in metrics if "eval_reward" in m]
    assert evaluated == list(range(TRAIN_STEPS_TINY + 1)), metrics
    assert (train / f"step-{TRAIN_STEPS_TINY}" / "config.json").is_file()
    assert "rltap train" in result.stdout
    assert f"train run files: {train}" in result.stdout


def test_plan_copies_each_examples_rows_and_names_what_is_missing(tmp_path: Path) -> None:
    from rich.console import Console

    from rltap.cli.commands import build_parser
    from rltap.config import DemoConfig, from_namespace
    from rltap_dev.demo import demo_table, plan_runs

    python = sys.executable
    args = build_parser().parse_args(
        ["demo", "--python", f"openai_agents={python}", "--python", f"langchain={python}",
         "--python", "camel=/no/such/python", "--out", str(tmp_path)]
    )  # fmt: skip
    config = from_namespace(DemoConfig, args)
    runs = {run.framework: run for run in plan_runs(config, REPO_ROOT, tmp_path / "demo-x")}

    assert list(runs) == [example.framework for example in EXAMPLES]
    assert "/no/such/python" in runs["camel"].problem
    assert not runs["camel"].command
    for name in ("openai_agents", "langchain"):
        run = runs[name]
        copied = (run.out_dir / "data.jsonl").read_text().splitlines()
        assert run.rows == len(copied) == next(e.rows for e in EXAMPLES if e.framework == name)
        assert run.command[:4] == [python, "-m", "rltap.cli", "rollout"]
        assert run.command[run.command.index("--group-size") + 1] == "2"
        assert "--admin-key" not in run.command  # the key travels in RLTAP_ADMIN_KEY

    console = Console(width=200, record=True)
    console.print(demo_table(list(runs.values())))
    text = console.export_text()
    assert "camel" in text
    assert "not run" in text


def test_training_is_the_langchain_agent_with_its_examples_settings(tmp_path: Path) -> None:
    from rltap_dev.demo_train import TRAIN_EXAMPLE, TRAIN_STEPS, plan_training

    python = Path(sys.executable)
    run = plan_training(REPO_ROOT, tmp_path, python=python, model="/models/m", tiny=False)
    folder = REPO_ROOT / TRAIN_EXAMPLE
    command = run.command
    assert command[:5] == [
        str(python),
        "-m",
        "rltap.cli",
        "train",
        f"{folder / 'agent.py'}:ShapedAgent",
    ]

    def flag(name: str) -> str:
        return command[command.index(name) + 1]

    assert flag("--config") == str(folder / "train.toml")
    assert flag("--data") == str(folder / "train.jsonl")
    assert (flag("--model"), flag("--out"), flag("--steps")) == (
        "/models/m",
        str(tmp_path / "train"),
        str(TRAIN_STEPS),
    )
    assert (flag("--eval-every"), flag("--save-every")) == ("1", str(TRAIN_STEPS))
    held_out = Path(flag("--eval-data")).read_text().splitlines()
    assert held_out == (folder / "eval.jsonl").read_text().splitlines()[: len(held_out)]
    assert 0 < len(held_out) < 16

    missing = plan_training(
        REPO_ROOT, tmp_path, python=tmp_path / "no-python", model="m", tiny=True
    )
    assert not missing.command
    assert "no-python" in missing.problem
    assert "make demo-venvs" in missing.problem


def test_a_failed_training_run_shows_the_end_of_its_log(tmp_path: Path) -> None:
    import asyncio
    import io

    from rich.console import Console

    from rltap_dev.demo_train import TrainRun, run_training_child

    run = TrainRun(tmp_path / "train", steps=2)
    script = "import sys\nfor i in range(40): print('line', i)\nsys.exit('ValueError: [bad] pack')"
    run.command = [sys.executable, "-c", script]
    asyncio.run(run_training_child(run, tmp_path, Console(file=io.StringIO())))

    assert run.returncode == 1
    assert run.problem.startswith(f"exit 1; see {run.log}; it ends:\n")
    shown = run.problem.splitlines()[1:]
    assert shown[-1] == "ValueError: [bad] pack"  # the error, not only the exit status
    assert shown[0] == "line 16"  # the last 25 lines of the log
