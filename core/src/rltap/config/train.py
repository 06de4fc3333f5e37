"""`rltap train`'s settings: the loop (`LoopConfig`), the update (`UpdateConfig`), and the
episodes' rollouts on the proxy's settings (`TrainConfig.rollout()`): train = serve + rollout
+ update. `rltap.train.trainer.PolicyTrainer` and `rltap.train.loss.policy_loss` take the
`UpdateConfig` (and the trainer the `LoopConfig`) themselves.

Every flag is also a key of a YAML or TOML `--config` file (`rltap.config.flags`):

    rltap train examples/train_toy/agent.py:Agent --data rows.jsonl --model DIR --out RUN \\
        --steps 20 --rows-per-step 2 --group-size 8 --lr 1e-3
    rltap train --config run.yaml --steps 40      # the file's settings, 40 steps
    rltap train ... --lora-rank 8                 # a LoRA adapter instead of every weight
    rltap train ... --policy "tutor=Math Tutor:8" --policy "student=Student:8"
                                                  # a LoRA adapter per agent (`[policies]`)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

from rltap.config.evaluate import TrainEvalConfig
from rltap.config.flags import ConfigError, option, section
from rltap.config.policies import (
    POLICY_FLAG_HELP,
    PolicyConfig,
    check_policies,
    policies_from,
    policy_flag,
)
from rltap.config.rollout import (
    RAY_GROUP,
    AgentTask,
    EpisodeConfig,
    RayConfig,
    RolloutConfig,
    agents_option,
    check_launch,
)
from rltap.config.serve import ServeConfig

__all__ = [
    "LoopConfig",
    "LoraConfig",
    "PrecisionConfig",
    "RanksConfig",
    "TrainConfig",
    "TrainDtype",
    "UpdateConfig",
]


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    """Steps, the rows and episodes of each, and when to checkpoint."""

    steps: int = option(10, "updates (default 10)")
    rows_per_step: int = option(4, "dataset rows per step")
    # --seed: the episodes' sampling (each step's its own) and the trainer's torch seed.
    episodes: EpisodeConfig = section(EpisodeConfig(group_size=8, seed=0))
    async_rollouts: bool = option(
        False,
        "run the next step's rollouts while this step trains (needs --max-staleness >= 1)",
        flag="async",
    )
    max_staleness: int = option(1, "versions (default 1)")
    save_every: int = option(1, "checkpoint every N steps")

    def __post_init__(self) -> None:
        for name in ("steps", "rows_per_step", "save_every"):
            if getattr(self, name) < 1:
                msg = f"--{name.replace('_', '-')} must be at least 1"
                raise ConfigError(msg)
        if self.max_staleness < 0:
            raise ConfigError("--max-staleness must be at least 0")
        if self.async_rollouts and self.max_staleness < 1:
            msg = "--async trains on tokens one version old: it needs --max-staleness >= 1"
            raise ConfigError(msg)


Algorithm = Literal["grpo", "ppo"]
# How advantages are normalised (`rltap.train.advantages.Normalisation`'s values but "none").
Normalisation = Literal["group", "batch"]


@dataclass(frozen=True, kw_only=True)
class UpdateConfig:
    """The policy update: algorithm, optimizer and the clipped objective's knobs."""

    algo: Algorithm = option(
        "grpo",
        "grpo: advantages normalised per group, one update per step; ppo: normalised over "
        "the step, --minibatches updates per step (default 4)",
    )
    lr: float = option(1e-5, "AdamW learning rate")
    weight_decay: float = option(0.0, "AdamW weight decay")
    clip: float = option(
        0.2,
        "ratio clip (default 0.2) of the ratio to the step's starting weights; with one update "
        "per step (grpo, --minibatches 1) that ratio is 1, so it acts only from a step's "
        "second minibatch on (ppo); stale or mismatched tokens are weighted by --behaviour-cap",
    )
    behaviour_cap: float = option(5.0, "behaviour weight cap")
    kl_coef: float = option(
        0.0,
        "KL penalty to the initial model; the `kl` metric is that KL, or with 0 the KL to "
        "the engine's logprobs (engine/trainer mismatch with one update per step)",
    )
    max_grad_norm: float = option(1.0, "gradient clipping norm")
    minibatches: int | None = option(None, "updates per step")
    micro_batch_tokens: int = option(2048, "tokens per forward")
    temperature: float = option(
        1.0,
        "the agents' sampling T: every call of an episode samples with it, whatever T the "
        "agent asks for (the trainer divides the logits by the same T)",
    )

    def __post_init__(self) -> None:
        if self.algo not in get_args(Algorithm):
            msg = f"--algo takes one of {', '.join(get_args(Algorithm))}, got {self.algo!r}"
            raise ConfigError(msg)
        if self.minibatches is not None and self.minibatches < 1:
            raise ConfigError("--minibatches must be at least 1")
        if self.micro_batch_tokens < 1:
            raise ConfigError("--micro-batch-tokens must be at least 1")
        if self.temperature <= 0:
            raise ConfigError("--temperature must be positive (the trainer divides by it)")
        if self.clip < 0 or self.behaviour_cap <= 0 or self.kl_coef < 0:
            raise ConfigError("--clip and --kl-coef must be >= 0, --behaviour-cap positive")

    @property
    def updates_per_step(self) -> int:
        """--minibatches, or the one --algo implies: 4 for ppo, 1 for grpo."""
        if self.minibatches is not None:
            return self.minibatches
        return 4 if self.algo == "ppo" else 1

    @property
    def normalisation(self) -> Normalisation:
        """How --algo normalises advantages: per group (grpo) or over the step (ppo)."""
        return "batch" if self.algo == "ppo" else "group"


@dataclass(frozen=True, kw_only=True)
class LoraConfig:
    """LoRA (peft) instead of full fine-tuning: with `--lora-rank` > 0 only the adapter trains,
    the engine serves base + adapter and each weight sync moves only the adapter's tensors.

    The adapter has no dropout (the engine samples without it, so the trainer must score the
    same function) and trains no other module (`modules_to_save`): the engine is sent the
    adapter's tensors only."""

    lora_rank: int = option(0, "LoRA rank; 0 (the default) trains every weight")
    lora_alpha: int | None = option(
        None, "LoRA alpha (the adapter is scaled by alpha / rank); default 2 x --lora-rank"
    )
    lora_target_modules: str = option(
        "all-linear",
        "the modules LoRA adapts: peft's `all-linear` (default: every linear layer but the "
        "output layer) or comma-separated module names, e.g. q_proj,v_proj",
        metavar="MODULES",
    )

    def __post_init__(self) -> None:
        if self.lora_rank < 0:
            raise ConfigError("--lora-rank must be 0 (full fine-tuning) or more")
        if self.lora_alpha is not None and self.lora_alpha <= 0:
            raise ConfigError("--lora-alpha must be positive")
        if not self.targets:
            raise ConfigError("--lora-target-modules names no module")

    @property
    def enabled(self) -> bool:
        """Whether the run trains a LoRA adapter (rank > 0)."""
        return self.lora_rank > 0

    @property
    def alpha(self) -> int:
        """--lora-alpha, or twice the rank."""
        return 2 * self.lora_rank if self.lora_alpha is None else self.lora_alpha

    @property
    def targets(self) -> str | list[str]:
        """peft's `target_modules`: "all-linear", or the list of module names."""
        names = [name.strip() for name in self.lora_target_modules.split(",") if name.strip()]
        return "all-linear" if names == ["all-linear"] else names


# torch.distributed's backend for the trainer ranks (`rltap.train.launcher.process_group`).
Backend = Literal["auto", "nccl", "gloo"]


@dataclass(frozen=True, kw_only=True)
class RanksConfig:
    """The trainer's ranks on torch.distributed (FSDP2, `rltap.train.distributed`)."""

    nproc_per_node: int = option(
        1,
        "trainer ranks on this machine, which rltap train launches itself (torch's elastic "
        "launcher); under torchrun, the ranks torchrun started",
    )
    rank_timeout: float = option(
        7200.0,
        "seconds a trainer rank waits in a collective before the run fails (the ranks other "
        "than 0 wait through rank 0's rollouts and evaluations: longer than the longest)",
        metavar="SECONDS",
    )
    dist_backend: Backend = option(
        "auto",
        "torch.distributed backend: auto (NCCL on GPUs, else gloo), nccl or gloo; NCCL without "
        "a GPU falls back to gloo with a line that says so",
    )

    def __post_init__(self) -> None:
        if self.dist_backend not in get_args(Backend):
            msg = f"--dist-backend takes one of {', '.join(get_args(Backend))}"
            raise ConfigError(msg)
        if self.nproc_per_node < 1:
            raise ConfigError("--nproc-per-node must be at least 1")
        if self.rank_timeout <= 0:
            raise ConfigError("--rank-timeout must be positive")


TrainDtype = Literal["float32", "bfloat16"]


@dataclass(frozen=True, kw_only=True)
class PrecisionConfig:
    """The trainer's precision and memory: the dtype it computes in, recomputed activations and
    parameters kept on the CPU."""

    dtype: TrainDtype = option(
        "float32",
        "float32 (exact, the default) or bfloat16: bf16 parameters and compute, fp32 master "
        "weights, AdamW state and gradient reduction (FSDP2's MixedPrecisionPolicy)",
    )
    gradient_checkpointing: bool = option(
        False, "recompute each decoder layer's activations in the backward (less memory)"
    )
    cpu_offload: bool = option(
        False,
        "keep the sharded parameters, gradients and AdamW state in CPU memory "
        "(FSDP2's CPUOffloadPolicy; needs more than one trainer rank or torchrun)",
    )

    def __post_init__(self) -> None:
        if self.dtype not in get_args(TrainDtype):
            msg = f"--dtype takes one of {', '.join(get_args(TrainDtype))}, got {self.dtype!r}"
            raise ConfigError(msg)


@dataclass(frozen=True, kw_only=True)
class TrainConfig(AgentTask):
    """`rltap train`: AGENT's episodes on --data, --model trained on them, the run in --out.

    With policies (`--policy`, or in the `--config` file a `[policies.NAME]` table each: its
    `agents`, `lora_rank`, optional `lr` and `kl_coef`) each named group of agents trains its
    own LoRA adapter over --model, and the agents no policy names run on the frozen base model
    (`rltap.config.policies`)."""

    # Needed besides the fields without a default; `rltap serve` takes no --model.
    REQUIRED_TOO: ClassVar[tuple[str, ...]] = ("model",)

    out: str = option(help="run folder (a second run on it resumes)")
    agents: list[str] | None = agents_option()  # e.g. one role of a multi-agent episode
    # A LoRA adapter per named group of agents (`rltap.config.policies`); None: one policy
    # (every weight, or one --lora-rank adapter) serves and trains every call.
    policies: dict[str, PolicyConfig] | None = option(
        None,
        POLICY_FLAG_HELP,
        flag="policy",
        metavar="NAME=AGENT[,AGENT...]:RANK",
        parse=policy_flag,
        append=True,
        convert=policies_from,
    )
    loop: LoopConfig = section(LoopConfig, "loop")
    update: UpdateConfig = section(UpdateConfig, "update")
    lora: LoraConfig = section(LoraConfig, "LoRA (peft)")
    ranks: RanksConfig = section(RanksConfig, "trainer ranks (torch.distributed)")
    precision: PrecisionConfig = section(PrecisionConfig, "precision and memory")
    evaluation: TrainEvalConfig = section(TrainEvalConfig, "held-out evaluation")
    serve: ServeConfig = section(ServeConfig)
    ray: RayConfig = section(RayConfig, RAY_GROUP)

    def __post_init__(self) -> None:
        if not self.serve.engine.model:
            raise ConfigError("missing --model")
        check_launch(self.serve, self.ray)
        check_policies(
            self.policies,
            agents=self.agents,
            lora_rank=self.lora.lora_rank,
            engine=self.serve.engine.engine,
        )
        if self.policies is not None and (
            self.ray.ray is not None or self.ranks.nproc_per_node > 1
        ):
            msg = (
                "policies ([policies] or --policy) train in one process for now: drop --ray and "
                "--nproc-per-node"
            )
            raise ConfigError(msg)
        # The proxy routes each call to its agent's policy: its serving settings carry them.
        object.__setattr__(self, "serve", self.serve.with_policies(self.policies))

    @property
    def model(self) -> str:
        """The model trained (and served, at first)."""
        assert self.serve.engine.model  # checked at construction
        return self.serve.engine.model

    def rollout(self) -> RolloutConfig:
        """Each step's rollouts: the agent's episodes on the proxy, exported as token tries."""
        return RolloutConfig(
            agent=self.agent,
            data=self.data,
            out=self.out,
            episodes=self.loop.episodes,
            style="tree",
            agents=self.agents,
            serve=self.serve,
            ray=self.ray,
        )
