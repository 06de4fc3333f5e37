"""The engines rltap builds, by name: the one list that `--engine`'s choices
(`rltap.config.serve.EngineKind`), the server engines (`SERVER_ENGINES`), `rltap.engines`'
classes and `rltap.engines.create_engine` derive from.

Adding an engine is one module under `rltap.engines` and one line in `ENGINES`: the factory
gives its class the engine settings (`EngineConfig`'s fields) its constructor names by those
names (`url`, `model`, `script`, ...), each required where the constructor has no default. The
classes are named, not imported: this list sits below the engines, and importing one pulls in
its stack (torch, an HTTP client).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ENGINES", "ENGINE_KINDS", "SERVER_ENGINES", "EngineEntry", "engines_help"]


@dataclass(frozen=True, slots=True)
class EngineEntry:
    """One engine: its class, where its model runs, and its part of `--engine`'s help."""

    target: str  # "module:Class"
    # True: it talks to an inference server at --url. False: it runs --model in this process,
    # which needs torch (the rltap[embedded] extra).
    server: bool
    about: str
    # Whether it serves several LoRA adapters over its model, each call choosing one by name:
    # what `rltap train`'s policies need (`rltap.config.policies`).
    adapters: bool = False

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def class_name(self) -> str:
        return self.target.partition(":")[2]


ENGINES: dict[str, EngineEntry] = {
    "transformers": EngineEntry(
        "rltap.engines.transformers:TransformersEngine",
        server=False,
        about="embedded (default)",
        adapters=True,
    ),
    "vllm": EngineEntry(
        "rltap.engines.vllm:VLLMEngine", server=True, about="a server at --url", adapters=True
    ),
    "sglang": EngineEntry(
        "rltap.engines.sglang:SGLangEngine",
        server=True,
        about="a server at --url",
        adapters=False,
    ),
    "scripted": EngineEntry(
        "rltap.engines.scripted:ScriptedEngine",
        server=False,
        about="replies from --script, logprobs from --model",
        adapters=True,
    ),
}

ENGINE_KINDS: tuple[str, ...] = tuple(ENGINES)
SERVER_ENGINES: tuple[str, ...] = tuple(name for name, entry in ENGINES.items() if entry.server)


def engines_help() -> str:
    """`--engine`'s help: each engine and what it runs on."""
    return "; ".join(f"{name}: {entry.about}" for name, entry in ENGINES.items())
