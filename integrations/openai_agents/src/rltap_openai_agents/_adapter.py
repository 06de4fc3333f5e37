"""`OpenAIAgentsAdapter`: an OpenAI Agents SDK agent as an rltap agent, `run(data, **kwargs)`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from agents import Agent, ModelSettings, RunConfig, Runner
from agents.result import RunResultBase

from rltap.adapter import AgentAdapter, Api, Connection, InputFn, RewardFn, check_api
from rltap_openai_agents._client import proxy_client, proxy_model, proxy_run_config
from rltap_openai_agents._requirements import FRAMEWORK_REQUIREMENT

__all__ = ["INPUT_KEYS", "AgentFactory", "EpisodeFn", "OpenAIAgentsAdapter", "default_input"]

AgentFactory = Callable[[Any], Agent[Any]]
EpisodeFn = Callable[[RunConfig, Any], Awaitable[Any]]

INPUT_KEYS = ("input", "question", "prompt", "messages")


class OpenAIAgentsAdapter(AgentAdapter):
    """Runs an OpenAI Agents SDK agent against the rltap proxy, one episode per dataset row.

    Usage (the adapter runs the agent; the reward is a function of the run and the row):
        @function_tool
        def calculate(expression: str) -> str: ...

        def build_agent(data):
            return Agent(name="calc", instructions="Use the tool.", tools=[calculate])

        def exact_match(result, data):
            return float(str(result.final_output).strip() == data["answer"])

        agent = OpenAIAgentsAdapter(build_agent, api="chat", stream=True, reward_fn=exact_match)

    Or run the SDK yourself and return the reward (`run_config` sends every model call to the
    proxy, with tracing off):
        async def episode(run_config, data):
            result = await Runner.run(build_agent(data), data["question"], run_config=run_config)
            return float(result.final_output == data["answer"])

        agent = OpenAIAgentsAdapter(episode=episode, api="responses")

    `agent` is an `Agent` or a function of the row that builds one (a module-level function
    keeps the adapter picklable for subprocess mode; an `Agent` with function tools is not).
    Every agent of the run, handoffs and agents-as-tools included, uses the proxy's model over
    Chat Completions (`api="chat"`) or Responses (`api="responses"`), whatever model it names.
    `stream=True` runs `Runner.run_streamed` and consumes its events. `input_fn(data)` gives the
    run input (default: `default_input`). `reward_fn(result, data)` receives the `RunResult`
    (or, with `episode`, what it returned); without it the agent mode assigns no reward and the
    episode mode's return value is the reward.
    """

    requirement: ClassVar[str] = FRAMEWORK_REQUIREMENT

    def __init__(
        self,
        agent: Agent[Any] | AgentFactory | None = None,
        *,
        episode: EpisodeFn | None = None,
        api: Api = "chat",
        stream: bool = False,
        max_turns: int = 10,
        input_fn: InputFn | None = None,
        reward_fn: RewardFn | None = None,
        model_settings: ModelSettings | None = None,
        max_retries: int = 0,
        model: str = "rltap",
    ) -> None:
        super().__init__(reward_fn=reward_fn, model=model)
        if (agent is None) == (episode is None):
            msg = "pass exactly one of agent (an Agent or a function of the row) and episode"
            raise TypeError(msg)
        self.agent = agent
        self.episode = episode
        self.api = check_api(api)
        self.stream = stream
        self.max_turns = max_turns
        self.input_fn = input_fn or default_input
        self.model_settings = model_settings
        self.max_retries = max_retries

    def __getstate__(self) -> dict[str, Any]:
        if isinstance(self.agent, Agent):
            msg = (
                "an OpenAIAgentsAdapter holding an Agent instance cannot be pickled for "
                "subprocess mode (its function tools are closures); pass a module-level "
                "function that builds the Agent from the row instead"
            )
            raise TypeError(msg)
        return self.__dict__.copy()

    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        client = proxy_client(connection, max_retries=self.max_retries)
        try:
            model = proxy_model(client, self.api, self.model)
            run_config = proxy_run_config(model, model_settings=self.model_settings)
            if self.episode is not None:
                return await self.episode(run_config, data)
            # HTTP errors, and error events inside a stream, are mapped to rltap's errors by the
            # base class.
            result = await self._run_agent(data, run_config)
        finally:
            if connection.http_client is None:  # a client the workflow passed in stays open
                await client.close()
        return result if self.reward_fn is not None else None

    async def _run_agent(self, data: Any, run_config: RunConfig) -> RunResultBase:
        agent = self.agent
        if not isinstance(agent, Agent):
            assert agent is not None  # __init__ takes an agent when there is no episode
            agent = agent(data)
        run_input = self.input_fn(data)
        if not self.stream:
            return await Runner.run(
                agent, run_input, max_turns=self.max_turns, run_config=run_config
            )
        streamed = Runner.run_streamed(
            agent, run_input, max_turns=self.max_turns, run_config=run_config
        )
        # Draining the events runs the agent to its end and raises what the run raised.
        async for _ in streamed.stream_events():
            pass
        return streamed


def default_input(data: Any) -> str | list[Any]:
    """The run input for a row: a string as is, a list as input items, or a mapping's first
    field of `input`, `question`, `prompt`, `messages`.

    Usage:
        default_input({"question": "What is 2+3?", "answer": "5"})  # "What is 2+3?"
    """
    if isinstance(data, str | list):
        return data
    if isinstance(data, Mapping):
        for key in INPUT_KEYS:
            value = data.get(key)
            if isinstance(value, str | list):
                return value
        found = ", ".join(map(repr, data)) or "none"
        msg = (
            f"the row has none of the fields {', '.join(INPUT_KEYS)} (it has {found}); pass "
            "input_fn=... to say what the agent is asked"
        )
        raise ValueError(msg)
    msg = f"cannot make an agent input from a {type(data).__name__} row; pass input_fn=..."
    raise TypeError(msg)
