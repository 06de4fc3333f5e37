"""rltap inside verl's agent loop: any rltap agent's episodes become verl's training rows.

Importing the package registers the agent loop `rltap_agent` with verl (verl imports it in
each of its processes through the `verl.plugins` entry point). Its settings (`RltapSettings`)
come from the agent loop's YAML entry or a `rltap:` section of verl's config; see README.md and
rltap_agent.yaml.

Usage:
    python -m verl.trainer.main_ppo ... trainer.use_v1=True \\
        actor_rollout_ref.rollout.agent.default_agent_loop=rltap_agent \\
        actor_rollout_ref.rollout.agent.agent_loop_config_path=integrations/verl/rltap_agent.yaml
"""

from __future__ import annotations

from rltap_verl._agent_loop import AGENT_NAME, RltapAgentLoop
from rltap_verl._engine import ServerManager, VerlServerEngine, logprob_convention_of
from rltap_verl._outputs import branch_output, inert_output
from rltap_verl._requirements import VERL_REQUIREMENT
from rltap_verl._settings import RltapSettings
from rltap_verl._worker import close_worker_proxies

__all__ = [
    "AGENT_NAME",
    "VERL_REQUIREMENT",
    "RltapAgentLoop",
    "RltapSettings",
    "ServerManager",
    "VerlServerEngine",
    "branch_output",
    "close_worker_proxies",
    "inert_output",
    "logprob_convention_of",
]
