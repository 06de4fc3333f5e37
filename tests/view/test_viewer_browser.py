"""The viewer in a real browser: headless Chromium (Debian's `chromium`, driven by Playwright)
on `rltap view`'s app served by uvicorn, over the run a killed proxy recorded and a training
run's folder (its metrics as `rltap train` writes them).

It opens the session list, sorts and filters it, opens a session's tree and an interaction, and
checks what the page shows; screenshots go to the test's folder (docs/viewer.png is one). The
runs and the server are tests/view/conftest.py's."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from capture_run import Recorded
from viewer_runs import TRAIN_REWARDS

# Debian's chromium, which `make bootstrap` installs (apt-get) where it is missing.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page(viewer_url: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM is not None, "no chromium on PATH: apt-get install -y chromium (make bootstrap)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        # Offline: a request to anywhere but the viewer fails the test.
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        outside: list[str] = []
        context.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(viewer_url)
                else (outside.append(route.request.url), route.abort())
            ),
        )
        page = context.new_page()
        page.goto(viewer_url)
        yield page
        assert outside == []
        browser.close()


def _rows(page: Any) -> list[list[str]]:
    return [
        [cell.strip() for cell in row.locator("td").all_inner_texts()]
        for row in page.locator("#sessions tbody tr").all()
    ]


def _open_session(page: Any, session_id: str, nodes: int) -> None:
    page.click(f"#sessions tr[data-session='{session_id}']")
    page.wait_for_function(
        "([id, n]) => document.querySelector('#session-title').textContent.startsWith(id)"
        " && document.querySelectorAll('#tree .node').length === n",
        arg=[session_id, nodes],
    )


def _sessions(recorded: Recorded) -> dict[str, str]:
    return {name: session.session_id for name, session in recorded.sessions.items()}


def test_the_session_list_sorts_and_filters(page: Any, recorded: Recorded, tmp_path: Path) -> None:
    page.select_option("#run", "rollout")
    page.wait_for_function("document.querySelectorAll('#sessions tbody tr').length === 3")
    page.click("#sessions th[data-sort=reward]")  # highest first
    page.wait_for_selector("#sessions th.sorted.desc[data-sort=reward]")
    rows = _rows(page)
    assert [row[1] for row in rows] == ["siblings", "ended", "open"]
    assert [row[4] for row in rows] == ["2", "1", "0.5"]  # each session's own rewards summed
    assert [row[5] for row in rows] == ["3", "3", "3"]  # calls, the refused one included
    assert [row[7] for row in rows] == ["0", "0", "1"]  # errors
    page.select_option("#state", "interrupted")
    page.wait_for_function("document.querySelectorAll('#sessions tbody tr').length === 1")
    assert _rows(page)[0][1:4] == ["open", _sessions(recorded)["open"][:12], "interrupted"]
    page.select_option("#state", "")
    page.check("#errors-only")
    page.wait_for_function("document.querySelectorAll('#sessions tbody tr').length === 1")
    page.uncheck("#errors-only")
    page.fill("#search", "sibl")
    page.wait_for_function("document.querySelectorAll('#sessions tbody tr').length === 1")
    page.fill("#search", "")
    page.wait_for_function("document.querySelectorAll('#sessions tbody tr').length === 3")
    bars = page.locator("#histogram rect.bar").all()
    assert sum(1 for bar in bars if float(bar.get_attribute("height") or 0) > 0) == 3
    page.screenshot(path=str(tmp_path / "sessions.png"))


def test_a_session_tree_shows_links_and_rewards_before_and_after_discounting(
    page: Any, recorded: Recorded, tmp_path: Path
) -> None:
    ended = recorded.sessions["ended"]
    _open_session(page, ended.session_id, 3)
    rewards = page.locator("#tree .node text.reward").all_text_contents()
    assert rewards == ["reward - → 0.81", "reward - → 0.9", "reward 1 → 1"]  # discount 0.9
    assert page.locator("#tree text.edge-label").all_text_contents() == ["prefix", "prefix"]
    page.fill("#discount", "0.5")
    page.dispatch_event("#discount", "change")
    page.wait_for_function(
        "document.querySelector('#tree .node text.reward').textContent.endsWith('0.25')"
    )

    siblings = recorded.sessions["siblings"]
    _open_session(page, siblings.session_id, 3)
    boxes = [node.bounding_box() for node in page.locator("#tree .node").all()]
    pair = boxes[:2]  # the n=2 choices: side by side on one level, the follow-up below
    assert pair[0]["y"] == pair[1]["y"]
    assert abs(pair[0]["x"] - pair[1]["x"]) >= pair[0]["width"]
    assert boxes[2]["y"] > pair[0]["y"]

    open_ = recorded.sessions["open"]
    _open_session(page, open_.session_id, 3)
    assert page.locator("#tree .node.failed").count() == 1
    page.screenshot(path=str(tmp_path / "tree.png"))


def test_an_interaction_shows_its_messages_and_tokens_by_logprob(
    page: Any, recorded: Recorded, tmp_path: Path
) -> None:
    ended = recorded.sessions["ended"]
    _open_session(page, ended.session_id, 3)
    last = ended.replies[-1]
    page.click(f"#tree .node[data-interaction='{last}']")
    page.wait_for_selector("#detail:not([hidden]) #tokens .token")
    messages = page.locator("#messages .message").all_inner_texts()
    assert len(messages) == 6  # three user turns, two earlier replies, then this call's reply
    assert messages[-1].startswith("assistant (this call's reply)")
    tokens = page.locator("#tokens .token")
    assert tokens.count() == len(ended.logprobs[last])
    shown = [float(tokens.nth(i).get_attribute("data-logprob")) for i in range(tokens.count())]
    assert shown == pytest.approx(ended.logprobs[last], abs=1e-5)
    # Decoded with the tokenizer the proxy recorded with: the reply, then its stop token.
    reply_text = messages[-1].split("\n", 1)[1]
    assert "".join(tokens.all_inner_texts()) == f"{reply_text}<|im_end|>"
    tokens.nth(2).hover()
    tip = page.locator("#tooltip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert f"id {tokens.nth(2).get_attribute('data-id')}" in text
    assert f"logprob {ended.logprobs[last][2]:.4f}" in text
    assert "version 0" in text
    page.screenshot(path=str(tmp_path / "interaction.png"), full_page=True)


def test_a_training_run_shows_its_reward_per_step(page: Any, tmp_path: Path) -> None:
    page.select_option("#run", "train")
    page.wait_for_selector("#steps-chart:not([hidden])")
    steps = page.locator("#steps circle.step")
    assert steps.count() == len(TRAIN_REWARDS)
    heights = [float(steps.nth(i).get_attribute("cy") or 0) for i in range(5)]
    assert heights[4] < heights[0]  # reward 0.9 drawn above reward 0.1
    page.screenshot(path=str(tmp_path / "train.png"))
