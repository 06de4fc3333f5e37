"""`rltap train`'s policies: a LoRA adapter per named group of agents, over one base model.

A multi-agent episode's calls name their agent (`X-Rltap-Agent`, which the adapters set from
CAMEL role names, Agents SDK agent names and the LangChain adapter's agent names). With
policies, each policy trains its own LoRA adapter on its agents' calls, and every agent no
policy names runs on the frozen base model. In the `--config` file:

    [policies.tutor]
    agents = ["Math Tutor"]
    lora_rank = 8

    [policies.student]
    agents = ["Student"]
    lora_rank = 8
    lr = 2e-5                # optional; default the run's --lr (kl_coef: the run's --kl-coef)

or on the command line, one `--policy` each (they replace the file's whole table):

    --policy "tutor=Math Tutor:8" --policy "student=Student:8:lr=2e-5"

What a run refuses before its first rollout (`check_policies`, from `TrainConfig`): a policy
without agents or without a LoRA rank, a name that cannot name an adapter (letters, digits, _
and -; not `default`, a single-policy run's adapter), an agent claimed by two policies,
`--agents` (the policies say whose calls train), a `--lora-rank` other than every policy's
rank, and an engine that serves no adapters by name (`EngineEntry.adapters`). Agent ids match
exactly, as `--agents` does: a LangChain helper's `planner/summary` is not `planner`.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from rltap.config.engines import ENGINES
from rltap.config.flags import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# `rltap.config.train`'s UpdateConfig or LoraConfig (named by type only: train imports this).
_Run = TypeVar("_Run", bound="DataclassInstance")

__all__ = [
    "POLICY_FLAG_HELP",
    "Policies",
    "PolicyConfig",
    "check_policies",
    "policies_from",
    "policy_flag",
    "policy_lines",
    "policy_of",
    "unseen_agents_warning",
]

# A policy's keys in the `--config` file (dashes or underscores alike).
_KEYS = ("agents", "lora_rank", "lr", "kl_coef")
# The optional ones `--policy` takes as KEY=VALUE after the rank.
_FLAG_KEYS = ("lr", "kl_coef")
# The longest agent id a call carries (`rltap.tree.links.agent_from_header`).
_AGENT_MAX_CHARS = 256
# A policy's name: its adapter's in peft (a module key: no "."), vLLM and the checkpoint.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
# The adapter name of a single-policy run (`rltap.engines.base.DEFAULT_POLICY`, peft's).
_SINGLE_POLICY = "default"

POLICY_FLAG_HELP = (
    "a policy: its own LoRA adapter (rank RANK) over --model, trained on the calls of these "
    "agents (the ids calls carry in X-Rltap-Agent); optional :lr=LR and :kl_coef=K (default "
    "the run's --lr and --kl-coef); repeat for several. Agents no policy names run on the "
    "frozen base model. Replaces the config file's [policies] table (whose entries take "
    "agents, lora_rank, lr, kl_coef; an agent id holding ',' or ':' needs the file); no "
    "--agents with policies, and --lora-rank, if given, must be every policy's rank"
)


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """One policy: the agents whose calls it serves and trains, its LoRA adapter's rank, and
    its own learning rate and KL coefficient (None: the run's `--lr`, `--kl-coef`).

    Usage:

        policies = {"tutor": PolicyConfig(agents=("Math Tutor",), lora_rank=8)}
        TrainConfig(..., policies=policies)
        trainer = PolicyTrainer(model, policies["tutor"].update(config.update), config.loop)
    """

    agents: tuple[str, ...]
    lora_rank: int
    lr: float | None = None
    kl_coef: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", tuple(self.agents))
        if not self.agents:
            raise ConfigError("names no agent: give the ids its calls carry in X-Rltap-Agent")
        for agent in self.agents:
            if not isinstance(agent, str) or not 0 < len(agent.strip()) <= _AGENT_MAX_CHARS:
                msg = (
                    f"agents holds {agent!r}: an agent id is a string of 1 to "
                    f"{_AGENT_MAX_CHARS} characters, as X-Rltap-Agent carries it"
                )
                raise ConfigError(msg)
            if agent != agent.strip():
                msg = f"agents holds {agent!r}: a call's agent id has no surrounding spaces"
                raise ConfigError(msg)
        twice = sorted({agent for agent in self.agents if self.agents.count(agent) > 1})
        if twice:
            msg = f"names agent {twice[0]!r} twice"
            raise ConfigError(msg)
        if isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int):
            msg = f"lora_rank is the LoRA adapter's rank, a whole number; got {self.lora_rank!r}"
            raise ConfigError(msg)
        if self.lora_rank < 1:
            msg = (
                f"lora_rank must be at least 1, got {self.lora_rank}: with policies every "
                "policy trains a LoRA adapter over the frozen base model"
            )
            raise ConfigError(msg)
        for key in ("lr", "kl_coef"):
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                msg = f"{key} must be a number, got {value!r}"
                raise ConfigError(msg)
            if not math.isfinite(value) or value < 0 or (key == "lr" and value == 0):
                shown = "positive" if key == "lr" else "at least 0"
                msg = f"{key} must be {shown}, got {value}"
                raise ConfigError(msg)
            object.__setattr__(self, key, float(value))

    def update(self, run: _Run) -> _Run:
        """The run's update settings with this policy's `lr` and `kl_coef` where it has them:
        what its trainer takes (`PolicyTrainer(model, policy.update(config.update), ...)`)."""
        own = {key: getattr(self, key) for key in ("lr", "kl_coef")}
        return replace(run, **{key: value for key, value in own.items() if value is not None})

    def lora(self, run: _Run) -> _Run:
        """The run's LoRA settings (`--lora-alpha`, `--lora-target-modules`) at this policy's
        rank: what `rltap.train.lora.lora_model` takes for its adapter (alpha: twice this
        rank unless --lora-alpha)."""
        return replace(run, lora_rank=self.lora_rank)


# The policies of a run, by name (`TrainConfig.policies`; None: one policy serves every call).
Policies = Mapping[str, PolicyConfig]


def policy_flag(text: str) -> tuple[str, dict[str, Any]]:
    """One `--policy NAME=AGENT[,AGENT...]:RANK[:lr=LR][:kl_coef=K]` as the policy's name and
    its table (the `[policies.NAME]` keys), checked by `policies_from` with the file's."""
    name, sep, rest = text.partition("=")
    parts = rest.split(":")
    if not sep or not name.strip() or len(parts) < 2:
        msg = f"expected NAME=AGENT[,AGENT...]:RANK (e.g. tutor=Math Tutor:8), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    table: dict[str, Any] = {
        "agents": [agent.strip() for agent in parts[0].split(",") if agent.strip()]
    }
    try:
        table["lora_rank"] = int(parts[1])
    except ValueError:
        msg = f"{name.strip()}: RANK after the agents is a whole number, got {parts[1]!r}"
        raise argparse.ArgumentTypeError(msg) from None
    for part in parts[2:]:
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _FLAG_KEYS:
            msg = f"{name.strip()}: after the rank come lr=LR and kl_coef=K, got {part!r}"
            raise argparse.ArgumentTypeError(msg)
        try:
            table[key] = float(value)
        except ValueError:
            msg = f"{name.strip()}: {key} is a number, got {value!r}"
            raise argparse.ArgumentTypeError(msg) from None
    return name.strip(), table


def policies_from(value: Any) -> dict[str, PolicyConfig] | None:
    """`TrainConfig.policies` from what the command line or the file gives: None (no policy),
    the `--policy` flags' `(name, table)` pairs, or the file's `[policies]` table (name ->
    table of keys, or name -> `PolicyConfig`). A refusal names the flag or the key."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        items = [(str(name), table) for name, table in value.items()]
        where = "[policies.{}]".format
        if not items:
            raise ConfigError("[policies] names no policy: give one table per policy")
    elif isinstance(value, list):
        items = list(value)
        where = "--policy {}".format
        names = [name for name, _ in items]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            msg = f"--policy {twice[0]} is given twice: one --policy per policy"
            raise ConfigError(msg)
    else:
        msg = f"[policies] is a table of policies, one per name; got {value!r}"
        raise ConfigError(msg)
    return {name: _policy(where(name), table) for name, table in items}


def _policy(where: str, table: Any) -> PolicyConfig:
    if isinstance(table, PolicyConfig):
        return table
    if not isinstance(table, Mapping):
        msg = f"{where} is a table with keys {', '.join(_KEYS)}; got {table!r}"
        raise ConfigError(msg)
    keys = {str(key).replace("-", "_"): item for key, item in table.items()}
    unknown = sorted(key for key in keys if key not in _KEYS)
    if unknown:
        msg = f"{where}: unknown keys {unknown} (a policy takes {', '.join(_KEYS)})"
        raise ConfigError(msg)
    if "lora_rank" not in keys:
        msg = f"{where} needs lora_rank, its LoRA adapter's rank (at least 1)"
        raise ConfigError(msg)
    agents = keys.get("agents", ())
    if isinstance(agents, str):  # one agent
        agents = [agents]
    if not isinstance(agents, list | tuple):
        msg = f"{where}: agents is a list of agent ids, got {agents!r}"
        raise ConfigError(msg)
    try:
        return PolicyConfig(
            agents=tuple(agents),
            lora_rank=keys["lora_rank"],
            lr=keys.get("lr"),
            kl_coef=keys.get("kl_coef"),
        )
    except ConfigError as exc:
        msg = f"{where} {exc}"
        raise ConfigError(msg) from None


def check_policies(
    policies: Policies | None, *, agents: Collection[str] | None, lora_rank: int, engine: str
) -> None:
    """Refuse (`ConfigError`) policies that cannot run together with the run's other settings:
    an agent claimed by two policies, `--agents` (the policies choose whose calls train),
    a `--lora-rank` other than a policy's, or an engine that serves no adapters by name."""
    if policies is None:
        return
    for name, policy in policies.items():
        if not _NAME.fullmatch(name) or name == _SINGLE_POLICY:
            msg = (
                f"policy name {name!r}: a policy's name is 1 to 64 letters, digits, _ and - "
                "(starting with a letter or _), not 'default'; it names its LoRA adapter (peft, "
                "vLLM) and its checkpoint folder"
            )
            raise ConfigError(msg)
        if not isinstance(policy, PolicyConfig):
            msg = f"policy {name!r} is {policy!r}, not a PolicyConfig"
            raise ConfigError(msg)
    claimed: dict[str, str] = {}
    for name, policy in policies.items():
        for agent in policy.agents:
            if agent in claimed:
                msg = (
                    f"policies {claimed[agent]!r} and {name!r} both claim agent {agent!r}: an "
                    "agent's calls are served and trained by one policy"
                )
                raise ConfigError(msg)
            claimed[agent] = name
    if agents is not None:
        msg = (
            "--agents with policies ([policies] or --policy): the policies say whose calls "
            "train (each its own agents'; the others run on the frozen base model); drop --agents"
        )
        raise ConfigError(msg)
    for name, policy in policies.items():
        if lora_rank and policy.lora_rank != lora_rank:
            msg = (
                f"--lora-rank {lora_rank} with policy {name!r} of lora_rank "
                f"{policy.lora_rank}: with policies each policy's rank is its own; drop "
                "--lora-rank (--lora-alpha and --lora-target-modules apply to every policy)"
            )
            raise ConfigError(msg)
    entry = ENGINES.get(engine)
    if entry is not None and not entry.adapters:
        able = ", ".join(kind for kind, e in ENGINES.items() if e.adapters)
        msg = (
            f"--engine {engine} serves no LoRA adapters by name, which policies need (one "
            f"adapter per policy over --model): use one of {able}"
        )
        raise ConfigError(msg)


def policy_of(policies: Policies | None, agent: str | None) -> str | None:
    """The name of the policy that serves and trains the calls of `agent` (its
    `X-Rltap-Agent` id), or None: the frozen base model (no policy names it, or the run has no
    policies: then there is no base model to freeze, and one policy serves every call)."""
    if agent is None or policies is None:
        return None
    for name, policy in policies.items():
        if agent in policy.agents:
            return name
    return None


def policy_lines(policies: Policies, *, lr: float, kl_coef: float) -> list[str]:
    """The run's first lines: which policy serves which agents (with its rank, learning rate
    and KL coefficient, the run's `lr` and `kl_coef` where it has none of its own), and that
    the agents no policy names run on the frozen base model."""
    count = len(policies)
    lines = [f"{count} {'policy' if count == 1 else 'policies'}, a LoRA adapter each over --model:"]
    for name, policy in policies.items():
        own_lr = lr if policy.lr is None else policy.lr
        own_kl = kl_coef if policy.kl_coef is None else policy.kl_coef
        lines.append(
            f"  {name}: agents {_listed(policy.agents)} (LoRA rank {policy.lora_rank}, "
            f"lr {own_lr:g}, kl_coef {own_kl:g})"
        )
    lines.append("agents no policy names run on the frozen base model: their calls are not trained")
    return lines


def unseen_agents_warning(policies: Policies, seen: Iterable[str | None]) -> str | None:
    """The warning after the first step when a policy names an agent no call carried (a
    typo, or an id the framework spells otherwise), listing the ids the calls carried; None
    when every agent a policy names made a call."""
    carried = {agent for agent in seen if agent is not None}
    missing = [
        (name, [agent for agent in policy.agents if agent not in carried])
        for name, policy in policies.items()
    ]
    parts = [
        f"{name!r} names {_listed(agents)}"
        + (" (so it trains on no call)" if len(agents) == len(policies[name].agents) else "")
        for name, agents in missing
        if agents
    ]
    if not parts:
        return None
    shown = _listed(sorted(carried)) if carried else "none"
    return (
        f"policies name agents no call of the first step carried: {'; '.join(parts)}. The "
        f"calls carried these agent ids (X-Rltap-Agent; an unnamed agent's id comes from its "
        f"system prompt and tools, agent-<12 hex digits>): {shown}"
    )


def _listed(agents: Iterable[str]) -> str:
    return ", ".join(repr(agent) for agent in agents)
