"""The public surface, the declared verl range, and how verl finds the plugin."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import entry_points, requires, version

from conftest import REPO
from packaging.requirements import Requirement

import rltap_verl

EXPECTED_ALL = [
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


def test_all_is_the_declared_public_api() -> None:
    assert sorted(EXPECTED_ALL) == sorted(rltap_verl.__all__)
    for name in rltap_verl.__all__:
        assert getattr(rltap_verl, name) is not None


def test_installed_verl_is_in_the_declared_range() -> None:
    wanted = Requirement(rltap_verl.VERL_REQUIREMENT)
    assert wanted.name == "verl"
    assert wanted.specifier.contains(version("verl"))
    declared = [Requirement(line) for line in requires("rltap-verl") or []]
    assert wanted in declared
    assert any(r.name == "rltap" and str(r.specifier) == "==0.1.0" for r in declared)


def test_verl_loads_the_plugin_through_its_entry_point() -> None:
    [plugin] = [e for e in entry_points(group="verl.plugins") if e.value == "rltap_verl"]
    assert plugin.name == "rltap"


# A fresh process imports only verl (as each of verl's Ray workers does), which loads the
# plugin (registering "rltap_agent" with verl's public `register`), builds the loop as verl's
# worker does (hydra instantiate of the class `register` names), its settings from the `rltap:`
# section of verl's config, runs one episode and ends without closing the proxy: the plugin's
# exit hook must stop it, with nothing left pending.
EXIT_SCRIPT = textwrap.dedent(
    """
    import asyncio, atexit, socket
    state = {}

    def check():  # registered before verl loads the plugin: runs after the plugin's hook
        with socket.socket() as s:
            print("proxy", "open" if s.connect_ex(("127.0.0.1", state["port"])) == 0 else "closed")
    atexit.register(check)
    import sys
    import verl
    assert "rltap_verl" in sys.modules, "importing verl did not load the plugin"
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.workers.rollout.replica import TokenOutput
    from transformers import AutoTokenizer
    from rltap.testing.models import cached_tiny_model_dir

    class Manager:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            return TokenOutput(token_ids=[151645], log_probs=[-0.1],
                               extra_fields={"global_steps": 1})

    model = cached_tiny_model_dir()
    folder = verl.__file__.rsplit("/", 1)[0] + "/trainer/config"
    with initialize_config_dir(config_dir=folder, version_base=None):
        config = compose("ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=vllm",
            "+rltap.agent=verl_agents:FORKING"])
    entry = {"_target_": "rltap_verl._agent_loop.RltapAgentLoop"}
    loop = instantiate(
        entry, trainer_config=DictConfigWrap(config),
        server_manager=Manager(), tokenizer=AutoTokenizer.from_pretrained(str(model)),
        processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]))
    from verl_agents import FORKING
    event_loop = asyncio.new_event_loop()
    outputs = event_loop.run_until_complete(
        loop.run({"temperature": 1.0}, question="2+2?"))
    state["port"] = int(FORKING.base_urls[-1].rsplit(":", 1)[1].split("/")[0])
    print("outputs", len(outputs))
    """
)


def test_the_registered_name_runs_and_the_proxy_closes_when_the_process_ends() -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT],
        cwd=REPO / "integrations" / "verl" / "tests",
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["outputs 2", "proxy closed"]
    assert "Task was destroyed but it is pending" not in done.stderr
    assert "Traceback" not in done.stderr
