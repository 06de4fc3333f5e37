"""`rltap train`'s update settings for the trainer, from its configuration
(`rltap.config.train`, where every flag and `--config` key is declared)."""

from __future__ import annotations

from rltap.config import TrainConfig
from rltap.train.loss import LossSettings
from rltap.train.trainer import TrainSettings

__all__ = ["train_settings"]


def train_settings(config: TrainConfig) -> TrainSettings:
    """The update's settings (`--algo` picks the defaults it implies)."""
    update = config.update
    ppo = update.algo == "ppo"
    minibatches = update.minibatches if update.minibatches is not None else (4 if ppo else 1)
    return TrainSettings(
        lr=update.lr,
        weight_decay=update.weight_decay,
        max_grad_norm=update.max_grad_norm,
        micro_batch_tokens=update.micro_batch_tokens,
        minibatches=max(1, minibatches),
        max_staleness=config.loop.max_staleness,
        temperature=update.temperature,
        advantages="batch" if ppo else "group",
        loss=LossSettings(
            clip=update.clip, behaviour_cap=update.behaviour_cap, kl_coef=update.kl_coef
        ),
    )
