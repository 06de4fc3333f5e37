"""Every code block of README.md and of docs/*.md, run as written: the README first, then the
docs pages in name order, in one walk (a page may read what a README block wrote: the
quickstart's `runs/quickstart`, the training run's `runs/train`).

- `sh` blocks are split into commands. Each `rltap serve` line starts for real on a free port
  (vLLM's and SGLang's against the fakes the engine tests use) until `/health` answers and one
  chat completion goes through; `rltap rollout`, `train`, `models`, `inspect`, `export` and
  `view` lines run and their files are checked. `make demo` and `make test` are what `make
  demo` and CI run.
- `python` blocks run in this interpreter (top-level `await` allowed). One whose first line is
  `# <name>.py` is that file: it is written where the commands run. One importing a framework
  adapter runs in that framework's venv: `integrations/<fw>/tests/test_readme_quickstart.py`.
- `console` blocks are commands for machines this test is not (a Ray cluster, GPU nodes): each
  `rltap` command in one is parsed by rltap's own parser, each repository file it names must
  exist, and nothing runs.
- `text` blocks are `make demo`'s table: its columns and frameworks must be the demo's.
- `tree` blocks are the drawn trees of docs/recording.md's "How calls are linked":
  `tests/tree/test_links.py` builds each one and checks its links and rewards.
- `diagram` blocks are drawings.

The only edits are PLACEHOLDERS (a model folder, the engine servers' addresses), the port of each
`rltap serve` (a free one; the README's proxy at 127.0.0.1:8000 is the first one started) and
`rows.jsonl`, which the test writes. A block or command no rule covers fails the test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from rltap.cli.commands import build_parser
from rltap.testing.fakes import FakeSGLang, FakeVLLM
from rltap_dev.readme import README_PROXY, CodeBlock, code_blocks, run_python

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
DOCUMENTS = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
BLOCKS = [
    (doc.relative_to(REPO_ROOT).as_posix(), block)
    for doc in DOCUMENTS
    for block in code_blocks(doc)
]

MODEL = "/models/Qwen2.5-0.5B-Instruct"  # the tiny test model stands in for it
PROXY = README_PROXY  # the first `rltap serve` the README shows
VLLM = "http://127.0.0.1:8001"  # rltap.testing.fakes.FakeVLLM
SGLANG = "http://127.0.0.1:30000"  # rltap.testing.fakes.FakeSGLang
ROWS = [{"question": "What is 2+2?", "answer": "4"}, {"question": "What is 3+4?", "answer": "7"}]
ADMIN_KEY = "readme-admin-key-0123456789"
COMMAND_SECONDS = 600
COVERED_ELSEWHERE = {
    ("make", "demo"): "make demo runs itself; tests/e2e/test_demo.py runs `rltap demo --tiny`",
    ("make", "test"): "CI runs it (and with it this file)",
}
FRAMEWORK_MODULES = {
    "rltap_openai_agents": "openai_agents",
    "rltap_camel": "camel",
    "rltap_langchain": "langchain",
}
RUN_HERE = ("serve", "rollout", "train", "models", "inspect", "export", "view")
_FILE_BLOCK = re.compile(r"# (?P<name>[\w.-]+\.py)")
_REPOSITORY_FILE = re.compile(r"^(?:bench|examples|scripts)/[\w./-]+\.py$")


class NoRunner(AssertionError):
    """A block or command that no rule here knows how to run."""


@dataclass(frozen=True, slots=True)
class Step:
    """One thing to run: a whole block, or one command of a shell block."""

    doc: str  # the document, relative to the repository: README.md, docs/engines.md
    block: CodeBlock
    kind: str  # python | file | framework | output | make | serve | rollout | console | ...
    argv: tuple[str, ...] = ()
    target: str = ""  # the file a `file` block is; the framework of a `framework` block

    @property
    def label(self) -> str:
        shown = shlex.join(self.argv) if self.argv else self.kind
        return f"{self.doc}:{self.block.line} {shown}"


def _commands(text: str) -> Iterator[list[str]]:
    """The shell commands of a block: continuation lines joined, comments dropped."""
    for line in text.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            yield argv


def _python_step(doc: str, block: CodeBlock) -> Step:
    first = block.text.splitlines()[0] if block.text.strip() else ""
    named = _FILE_BLOCK.fullmatch(first)
    if named is not None:
        return Step(doc, block, "file", target=named.group("name"))
    imported = [
        framework
        for module, framework in FRAMEWORK_MODULES.items()
        if re.search(rf"^(from {module} import|import {module}\b)", block.text, re.MULTILINE)
    ]
    if len(imported) > 1:
        msg = f"{doc}:{block.line}: one framework per block, found {imported}"
        raise NoRunner(msg)
    if imported:
        if doc != "README.md":
            msg = f"{doc}:{block.line}: framework blocks are the README's quickstarts"
            raise NoRunner(msg)
        return Step(doc, block, "framework", target=imported[0])
    return Step(doc, block, "python")


def _shell_step(doc: str, block: CodeBlock, argv: list[str]) -> Step:
    if tuple(argv) in COVERED_ELSEWHERE:
        return Step(doc, block, "make", tuple(argv))
    if argv[0] == "rltap" and len(argv) > 1 and argv[1] in RUN_HERE:
        return Step(doc, block, argv[1], tuple(argv))
    msg = f"{doc}:{block.line}: no rule runs `{shlex.join(argv)}`; add one to {__name__}"
    raise NoRunner(msg)


def plan(block: CodeBlock, doc: str = "README.md") -> list[Step]:
    """What running `block` of `doc` means; raises NoRunner for a block no rule covers."""
    if block.language == "python":
        return [_python_step(doc, block)]
    if block.language == "sh":
        return [_shell_step(doc, block, argv) for argv in _commands(block.text)]
    if block.language == "console":
        return [Step(doc, block, "console", tuple(argv)) for argv in _commands(block.text)]
    if block.language in ("text", "tree", "diagram"):
        kind = {"text": "output"}.get(block.language, block.language)
        return [Step(doc, block, kind)]
    msg = f"{doc}:{block.line}: no rule runs a {block.language or 'plain'!r} block"
    raise NoRunner(msg)


@pytest.mark.parametrize(
    ("doc", "block"), [pytest.param(d, b, id=f"{d}:{b.label}") for d, b in BLOCKS]
)
def test_every_block_has_a_runner(doc: str, block: CodeBlock) -> None:
    steps = plan(block, doc)
    assert steps, f"{doc}:{block.line}: an empty block"


@pytest.mark.parametrize(
    ("language", "text"),
    [
        pytest.param("sh", "pip install rltap\n", id="other-command"),
        pytest.param("sh", "rltap demo --tiny\n", id="rltap-demo"),
        pytest.param("sh", "make soak\n", id="other-make-target"),
        pytest.param("bash", "rltap models tiny runs/x\n", id="other-language"),
        pytest.param("", "anything\n", id="no-language"),
    ],
)
def test_a_block_no_rule_covers_fails(language: str, text: str) -> None:
    with pytest.raises(NoRunner):
        plan(CodeBlock(language, text, line=1, heading=""))


def test_a_framework_block_outside_the_readme_fails() -> None:
    block = CodeBlock("python", "from rltap_camel import CamelAdapter\n", line=1, heading="")
    with pytest.raises(NoRunner, match="README's quickstarts"):
        plan(block, "docs/frameworks.md")


def test_the_documents_show_each_kind_of_block() -> None:
    steps = [step for doc, block in BLOCKS for step in plan(block, doc)]
    assert {step.kind for step in steps} >= {
        "python",
        "file",
        "framework",
        "output",
        "make",
        "serve",
        "rollout",
        "train",
        "models",
        "inspect",
        "export",
        "view",
        "console",
        "tree",
        "diagram",
    }
    frameworks = {step.target for step in steps if step.kind == "framework"}
    assert frameworks == set(FRAMEWORK_MODULES.values())


_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of `path`: lower case, punctuation dropped, spaces
    as dashes."""
    text = re.sub(r"^(```|~~~).*?^\1", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    titles = re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


def _check_links(doc: Path) -> None:
    for match in _LINK.finditer(doc.read_text(encoding="utf-8")):
        target = match["target"]
        if re.match(r"[a-z]+:", target):  # http:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        assert linked.exists(), f"{doc.name}: {target} links to no file"
        if anchor:
            assert anchor in _anchors(linked), f"{doc.name}: {target} links to no heading"


@pytest.mark.parametrize("doc", [pytest.param(d, id=d.name) for d in DOCUMENTS])
def test_links_between_the_documents_reach_a_file_and_heading(doc: Path) -> None:
    _check_links(doc)


@pytest.mark.parametrize(
    "link",
    [
        pytest.param("[x](missing.md)", id="file"),
        pytest.param("[x](other.md#no-such-heading)", id="heading"),
        pytest.param("[x](#a-heading-in-a-code-block)", id="heading-in-code"),
    ],
)
def test_a_link_to_no_file_or_heading_fails(tmp_path: Path, link: str) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Some heading\n")
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Doc\n\n```python\n# a heading in a code block\n```\n\n{link}\n")
    with pytest.raises(AssertionError):
        _check_links(doc)


# -- flags -----------------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _flags(command: str) -> set[str]:
    """The option strings `rltap <command>` takes."""
    parser = _subparsers(build_parser())[command]
    return {flag for action in parser._actions for flag in action.option_strings}


def _table(doc: str, heading: str) -> list[list[str]]:
    """The cells of the body rows of the first table under the heading line `heading`."""
    lines = (REPO_ROOT / doc).read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, f"{doc}: no table under {heading!r}"
    return rows[2:]


def test_the_engines_table_names_flags_of_every_command_that_starts_an_engine() -> None:
    rows = _table("docs/engines.md", "# Engines")
    flags = {flag for row in rows for flag in re.findall(r"--[a-z][a-z-]*", row[1])}
    assert flags >= {"--engine", "--model", "--url", "--tokenizer", "--script"}
    for command in ("serve", "rollout", "eval", "train", "demo"):
        assert flags <= _flags(command), f"rltap {command} lacks {flags - _flags(command)}"


def test_the_store_commands_table_names_their_real_flags() -> None:
    rows = _table("docs/recording.md", "### The flags of `rltap export`, `inspect` and `view`")
    for row in rows:
        command, *_ = row[0].strip("`").split()
        flags = re.findall(r"--[a-z][a-z-]*", row[0])
        assert flags, row
        assert set(flags) <= _flags(command), (
            f"rltap {command} lacks {set(flags) - _flags(command)}"
        )


def _console(step: Step) -> None:
    """A command for another machine: an `rltap` one must parse; repository files must exist."""
    for word in step.argv:
        if _REPOSITORY_FILE.match(word):
            assert (REPO_ROOT / word).is_file(), f"{step.label}: {word} does not exist"
    if step.argv[0] != "rltap":
        return
    try:
        build_parser().parse_args(list(step.argv[1:]))
    except SystemExit as exc:  # argparse's usage error
        raise AssertionError(f"{step.label}: rltap refuses this command") from exc


CONSOLE = [
    step for doc, block in BLOCKS if block.language == "console" for step in plan(block, doc)
]


@pytest.mark.parametrize("step", [pytest.param(step, id=step.label) for step in CONSOLE])
def test_console_commands_parse_and_name_files_that_exist(step: Step) -> None:
    _console(step)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(
            ["rltap", "train", "a.py:A", "--data", "d", "--out", "o", "--stepz", "1"], id="flag"
        ),
        pytest.param(["rltap", "serve", "--engine", "vllm2"], id="choice"),
        pytest.param([".venv/bin/python", "bench/no_such_bench.py"], id="file"),
    ],
)
def test_a_console_command_rltap_would_refuse_fails(argv: list[str]) -> None:
    step = Step("docs/x.md", CodeBlock("console", shlex.join(argv), 1, ""), "console", tuple(argv))
    with pytest.raises(AssertionError):
        _console(step)


# -- running the blocks ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Walk:
    """What the blocks share as the README goes on: the folder, the servers, the environment."""

    cwd: Path
    model_dir: Path
    stack: contextlib.AsyncExitStack
    env: dict[str, str]
    proxy_url: str | None = None
    ran: list[str] = field(default_factory=list)

    def rltap(self, step: Step, mapping: dict[str, str]) -> list[str]:
        """The command with `rltap` as this interpreter's module and the placeholders mapped."""
        argv = list(step.argv)
        for index, arg in enumerate(argv):
            if index > 0 and argv[index - 1] == "--port":
                argv[index] = str(_free_port())
            elif arg in mapping:
                argv[index] = mapping[arg]
            elif arg.startswith("/models/") or arg.startswith("http://"):
                msg = f"{step.label}: {arg} has no stand-in; add it to the mapping"
                raise NoRunner(msg)
        return [sys.executable, "-m", "rltap.cli", *argv[1:]]

    async def run(self, argv: list[str], label: str) -> str:
        log = self.cwd / f"command-{len(self.ran)}.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=self.cwd, env=self.env, stdout=out, stderr=asyncio.subprocess.STDOUT
            )
            try:
                returncode = await asyncio.wait_for(process.wait(), COMMAND_SECONDS)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        text = log.read_text(errors="replace")
        assert returncode == 0, f"{label} exited {returncode}:\n{text[-4000:]}"
        return text


async def _start(walk: Walk, step: Step, argv: list[str], ready: str) -> str:
    """Run `argv` (a server with `--port`) until the walk ends; its URL once `ready` answers 200."""
    port = argv[argv.index("--port") + 1]
    url = f"http://127.0.0.1:{port}"
    log = (walk.cwd / f"serve-{port}.log").open("wb")
    walk.stack.callback(log.close)
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=walk.cwd, env=walk.env, stdout=log, stderr=asyncio.subprocess.STDOUT
    )

    async def stop() -> None:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 30)

    walk.stack.push_async_callback(stop)
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for _ in range(600):
            assert process.returncode is None, f"{step.label} stopped:\n{_tail(walk, port)}"
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(ready)).status_code == 200:
                    return url
            await asyncio.sleep(0.2)
    raise AssertionError(f"{step.label}: {ready} never answered:\n{_tail(walk, port)}")


async def _serve(walk: Walk, step: Step) -> None:
    engine = step.argv[step.argv.index("--engine") + 1] if "--engine" in step.argv else ""
    mapping = {MODEL: str(walk.model_dir)}
    if engine == "vllm":
        mapping[VLLM] = (await walk.stack.enter_async_context(FakeVLLM())).url
    elif engine == "sglang":
        mapping[SGLANG] = (await walk.stack.enter_async_context(FakeSGLang())).url
    url = await _start(walk, step, walk.rltap(step, mapping), "/health")
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        admin = {"authorization": f"Bearer {ADMIN_KEY}"}
        session = (await http.post("/rl/start_session", json={}, headers=admin)).json()
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        key = {"authorization": f"Bearer {session['api_key']}"}
        reply = await http.post("/v1/chat/completions", json=body, headers=key)
        assert reply.status_code == 200, f"{step.label}: {reply.text}"
        assert reply.json()["choices"][0]["finish_reason"] in ("stop", "length")
    if walk.proxy_url is None:
        walk.proxy_url = url


async def _inspect(walk: Walk, step: Step) -> None:
    text = await walk.run(walk.rltap(step, {}), step.label)
    summary = json.loads((walk.cwd / step.argv[2] / "summary.json").read_text())
    rows = {cells[0]: cells for cells in _table_rows(text)}
    # state, sessions, exported, calls ok, ...: every episode a session, every line a call
    assert rows["all"][1] == str(summary["episodes_ok"]), f"{step.label}:\n{text}"
    assert rows["all"][3] == str(summary["interactions"]), f"{step.label}:\n{text}"


async def _export(walk: Walk, step: Step) -> None:
    import pyarrow.parquet as pq

    await walk.run(walk.rltap(step, {}), step.label)
    summary = json.loads((walk.cwd / step.argv[2] / "summary.json").read_text())
    table = pq.read_table(walk.cwd / step.argv[step.argv.index("--out") + 1])
    assert table.num_rows == summary["interactions"], (step.label, table.num_rows, summary)
    assert all(len(ids) > 0 for ids in table.column("input_ids").to_pylist())


async def _view(walk: Walk, step: Step) -> None:
    url = await _start(walk, step, walk.rltap(step, {}), "/api/runs")
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        runs = (await http.get("/api/runs")).json()["runs"]
        page = await http.get("/")
    source = walk.cwd / step.argv[2]
    stores = {str(path.parent.relative_to(source)) for path in source.rglob("capture.sqlite")}
    assert stores, f"{step.label}: no capture store under {source}"
    assert {run["name"] for run in runs} == stores, (step.label, runs, stores)
    assert page.status_code == 200, step.label
    assert "<html" in page.text.lower(), step.label


def _table_rows(text: str) -> list[list[str]]:
    """The cells of each body row of a rich table printed in `text`."""
    rows = [re.split(r"\s*│\s*", line.strip()) for line in text.splitlines() if "│" in line]
    return [[cell for cell in row if cell] for row in rows]


def _tail(walk: Walk, port: str) -> str:
    return (walk.cwd / f"serve-{port}.log").read_text(errors="replace")[-4000:]


async def _rollout(walk: Walk, step: Step) -> None:
    mapping = {MODEL: str(walk.model_dir)}
    if walk.proxy_url is not None:
        mapping[PROXY] = walk.proxy_url
    argv = walk.rltap(step, mapping)
    await walk.run(argv, step.label)
    out = walk.cwd / step.argv[step.argv.index("--out") + 1]
    summary = json.loads((out / "summary.json").read_text())
    sizes = [int(step.argv[i + 1]) for i, arg in enumerate(step.argv) if arg == "--group-size"]
    group = sizes[0] if sizes else 1
    assert summary["episodes_ok"] == len(ROWS) * group, (step.label, summary)
    assert summary["episodes_failed"] == 0, (step.label, summary)
    assert (out / "batch.safetensors").is_file()


async def _train(walk: Walk, step: Step) -> None:
    """`rltap train` on the tiny model, the repository's examples found from the walk's cwd."""
    examples = {arg: str(REPO_ROOT / arg) for arg in step.argv if arg.startswith("examples/")}
    argv = walk.rltap(step, {MODEL: str(walk.model_dir), **examples})
    await walk.run(argv, step.label)
    out = walk.cwd / step.argv[step.argv.index("--out") + 1]
    steps = int(step.argv[step.argv.index("--steps") + 1])
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, steps + 1))
    assert (out / f"step-{steps}" / "config.json").is_file()


async def _python(walk: Walk, step: Step) -> None:
    source = step.block.text
    mapping = {MODEL: str(walk.model_dir)}
    if walk.proxy_url is not None:
        mapping[PROXY] = walk.proxy_url
    for placeholder, value in mapping.items():
        source = source.replace(placeholder, value)
    if PROXY in source:
        raise NoRunner(f"{step.label}: uses the proxy before any `rltap serve` block")
    await run_python(source, name=re.sub(r"\W", "_", f"block_{step.doc}_{step.block.line}"))


def _output(step: Step) -> None:
    from rltap_dev.demo import EXAMPLES, demo_table

    headers = [str(column.header) for column in demo_table([]).columns]
    lines = step.block.text.splitlines()
    header_line = next(line for line in lines if "framework" in line)
    cells = [cell.strip() for cell in re.split(r"[┃│|]", header_line) if cell.strip()]
    assert cells == headers, f"{step.label}: the demo table's columns are {headers}"
    rows = [line for line in lines if line.startswith("│")]
    assert [re.split(r"\s*│\s*", row)[1] for row in rows] == [e.framework for e in EXAMPLES]


async def _run_step(walk: Walk, step: Step) -> None:
    if step.kind == "make":
        target = step.argv[1]
        makefile = (REPO_ROOT / "Makefile").read_text()
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"no `{target}` target"
    elif step.kind == "framework":
        test = REPO_ROOT / "integrations" / step.target / "tests" / "test_readme_quickstart.py"
        assert test.is_file(), f"{step.label}: {test} runs this block; it is missing"
        module = next(m for m, fw in FRAMEWORK_MODULES.items() if fw == step.target)
        assert f'run_quickstart(README, "{module}"' in test.read_text(), f"{test} runs no block"
    elif step.kind == "file":
        (walk.cwd / step.target).write_text(step.block.text, encoding="utf-8")
        compile(step.block.text, step.target, "exec")
    elif step.kind == "output":
        _output(step)
    elif step.kind == "diagram":
        pass
    elif step.kind == "tree":
        test = (REPO_ROOT / "tests" / "tree" / "test_links.py").read_text()
        assert "def test_the_docs_draw_the_trees_test_links_builds" in test
        assert f'"{step.doc}"' in test, f"{step.label}: tests/tree/test_links.py reads no such page"
    elif step.kind == "console":
        _console(step)
    elif step.kind == "serve":
        await _serve(walk, step)
    elif step.kind == "rollout":
        await _rollout(walk, step)
    elif step.kind == "train":
        await _train(walk, step)
    elif step.kind == "inspect":
        await _inspect(walk, step)
    elif step.kind == "export":
        await _export(walk, step)
    elif step.kind == "view":
        await _view(walk, step)
    elif step.kind == "models":
        await walk.run(walk.rltap(step, {}), step.label)
        assert (walk.cwd / step.argv[3] / "tokenizer.json").is_file()
    elif step.kind == "python":
        await _python(walk, step)
    else:
        raise NoRunner(f"{step.label}: unknown step kind {step.kind}")
    walk.ran.append(step.label)


@pytest.mark.slow
async def test_readme_and_docs_blocks_run_as_written(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name == "OPENAI_API_KEY" or name.startswith("LANGSMITH_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("RLTAP_ADMIN_KEY", ADMIN_KEY)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    steps = [step for doc, block in BLOCKS for step in plan(block, doc)]
    async with contextlib.AsyncExitStack() as stack:
        walk = Walk(tmp_path, tiny_model_dir, stack, env)
        for step in steps:
            await _run_step(walk, step)
    assert walk.ran == [step.label for step in steps]
