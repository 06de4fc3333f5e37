"""rltap plugin for TRL: GRPOTrainer trained on any rltap agent's episodes.

Usage:
    from rltap_trl import AgentRollout, rltap_reward

    with AgentRollout(agent) as rollout:  # agent: async def run(data, **kwargs)
        trainer = GRPOTrainer(model=model, args=GRPOConfig(...), train_dataset=dataset,
                              processing_class=tokenizer, reward_funcs=rltap_reward,
                              rollout_func=rollout)
        trainer.train()

Errors:
    RltapError
    ├── UnsupportedTrainer        colocated vLLM, a model sharded in process
    └── TokenizerMismatch         (rltap.chat) rltap would render with another tokenizer
    WorkflowError                 (rltap.rollout)
    ├── AllEpisodesFailed         (rltap.rollout.branches) no episode left a branch
    └── TooManyBranches           a prompt's episodes left more branches than TRL's rows
"""

from __future__ import annotations

from rltap_trl._generation import UnsupportedTrainer
from rltap_trl._requirements import TRL_REQUIREMENT
from rltap_trl._reward import rltap_reward
from rltap_trl._rollout import AgentRollout
from rltap_trl._rows import REWARD_FIELD, SESSION_FIELD, TooManyBranches

__all__ = [
    "REWARD_FIELD",
    "SESSION_FIELD",
    "TRL_REQUIREMENT",
    "AgentRollout",
    "TooManyBranches",
    "UnsupportedTrainer",
    "rltap_reward",
]
