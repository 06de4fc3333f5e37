"""`rltap demo`'s settings: which framework examples, how many rows and episodes, and the
proxy's settings (replies capped at 128 tokens unless --default-max-tokens says otherwise)."""

from __future__ import annotations

from dataclasses import dataclass

from rltap.config.flags import option, section
from rltap.config.serve import ChatConfig, ServeConfig

__all__ = ["DemoConfig"]


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """`rltap demo`: the three framework examples, then the training steps."""

    frameworks: list[str] | None = option(
        None, "a subset of openai_agents camel langchain (default: all three)", metavar="NAME"
    )
    tiny: bool = option(False, "the tiny random test model (smoke run)")
    rows: int | None = option(
        None, "rows of each dataset (default: 3, and 1 for camel's longer role play)"
    )
    group_size: int = option(2, "episodes per row (default 2)")
    out: str = option("runs", "output folder (default runs)")
    python: list[str] | None = option(
        None,
        "the interpreter of a framework's venv (default .nox/integration-framework-<name>)",
        metavar="FRAMEWORK=PATH",
        append=True,
    )
    episode_timeout: float | None = option(600.0, "seconds (default 600)")
    serve: ServeConfig = section(ServeConfig(chat=ChatConfig(default_max_tokens=128)))
