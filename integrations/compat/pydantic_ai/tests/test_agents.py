"""Pydantic AI's documented agents through the rltap proxy: each episode's calls are linked as
one tree (two app-level runs: two trees) and the reward set on a tree's last call reaches all of
its calls.

The agents are the documentation's own: the dice game (`@agent.tool_plain`, `@agent.tool`), the
flight booking example (structured `output_type`, agent delegation, then a programmatic hand-off
to a second agent) and the joke agent delegation. The scripted engine plays the model: it reads
the conversation and the offered tools and writes the reply, tool calls in hermes format, which
the proxy parses into native tool calls. A structured output is Pydantic AI's output tool
(`final_result`): the run ends on that call, so nothing ever answers it.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_ai import Agent, ModelRetry, RunContext, RunUsage, UsageLimits
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from rltap.testing.harness import ProxyFactory
from rltap.testing.scripts import tool_call_text, tool_names
from rltap.testing.trees import (
    assert_one_tree,
    assert_reward_reaches_every_call,
    link_kinds,
    run_session,
)
from rltap_dev.matrix import MULTI_AGENT, STRUCTURED, TOOL_LOOP, Cell, recorded_cell

FRAMEWORK = "pydantic_ai"
Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]] | None


def proxy_model(base_url: str, api_key: str) -> OpenAIChatModel:
    """The documented way to reach an OpenAI-compatible server: the provider's URL and key."""
    return OpenAIChatModel("tiny", provider=OpenAIProvider(base_url=base_url, api_key=api_key))


def tool_results(messages: Messages) -> list[str]:
    """The tool messages that end the conversation (the answers to the last tool calls)."""
    results: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.insert(0, str(message["content"]))
    return results


def parent_of(items: Sequence[Mapping[str, Any]], link: str) -> Any:
    """The parent id of the only call linked as `link`."""
    (parent,) = [item.get("parent_id") for item in items if item["link"] == link]
    return parent


def trees(items: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The exported calls grouped by the root they descend from, in the order the roots came."""
    by_id = {item["interaction_id"]: item for item in items}
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for item in items:
        node = item
        while node.get("parent_id") is not None:
            node = by_id[node["parent_id"]]
        grouped.setdefault(node["interaction_id"], []).append(item)
    return list(grouped.values())


# The dice game (docs: examples of tools).

PLAYER = "Anne"
DIE_FACE = 4
WINNER = f"{PLAYER}, the die shows 4 and you guessed 4:  you're a winner!\n"


def dice_game(model: OpenAIChatModel) -> Agent[str, str]:
    agent = Agent(
        model,
        deps_type=str,
        system_prompt=(
            "You're a dice game, you should roll the die and see if the number "
            "you get back matches the user's guess. If so, tell them they're a winner. "
            "Use the player's name in the response."
        ),
    )

    @agent.tool_plain
    def roll_dice() -> str:
        """Roll a six-sided die and return the result."""
        return str(DIE_FACE)

    @agent.tool
    def get_player_name(ctx: RunContext[str]) -> str:
        """Get the player's name."""
        return ctx.deps

    return agent


def dice_script(messages: Messages, tools: Tools, turn: int) -> str:
    """Rolls and asks the name in one turn, then answers from the two tool results."""
    results = tool_results(messages)
    if not results:
        return tool_call_text("roll_dice") + "\n" + tool_call_text("get_player_name")
    face, name = results
    return f"{name}, the die shows {face} and you guessed 4:  you're a winner!\n"


async def test_dice_game_is_one_chain(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(dice_script)
    outputs: list[str] = []

    async def play(base_url: str, api_key: str) -> None:
        result = await dice_game(proxy_model(base_url, api_key)).run("My guess is 4", deps=PLAYER)
        outputs.append(result.output)

    with recorded_cell(Cell(FRAMEWORK, "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, play)
        assert outputs == [WINNER]
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


async def test_streamed_dice_game_is_one_chain(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(dice_script)
    deltas: list[str] = []

    async def play(base_url: str, api_key: str) -> None:
        agent = dice_game(proxy_model(base_url, api_key))
        async with agent.run_stream("My guess is 4", deps=PLAYER) as result:
            deltas.extend(
                [delta async for delta in result.stream_text(delta=True, debounce_by=None)]
            )

    with recorded_cell(Cell(FRAMEWORK, "inline", True, "chat", TOOL_LOOP)):
        items = await run_session(proxy, play)
        assert "".join(deltas) == WINNER  # whitespace kept, token by token
        assert len(deltas) > 1
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


# The flight booking example: search agent -> extraction agent (delegation), then the seat
# preference agent in a second run of the application (programmatic hand-off).


class FlightDetails(BaseModel):
    """Details of the most suitable flight."""

    flight_number: str
    price: int
    origin: str = Field(description="Three-letter airport code")
    destination: str = Field(description="Three-letter airport code")
    date: datetime.date


class NoFlightFound(BaseModel):
    """When no valid flight is found."""


class SeatPreference(BaseModel):
    row: int = Field(ge=1, le=30)
    seat: Literal["A", "B", "C", "D", "E", "F"]


class Failed(BaseModel):
    """Unable to extract a seat selection."""


@dataclass
class Deps:
    web_page_text: str
    req_origin: str
    req_destination: str
    req_date: datetime.date


SEARCH_PROMPT = "Your job is to find the cheapest flight for the user on the given date. "
EXTRACTION_PROMPT = "Extract all the flight details from the given text."
SEAT_PROMPT = (
    "Extract the user's seat preference. Seats A and F are window seats. "
    "Row 1 is the front row and has extra leg room. Rows 14, and 20 also have extra leg room. "
)
FLIGHTS_PAGE = """
1. Flight SFO-AK123
- Price: $350
- Origin: San Francisco International Airport (SFO)
- Destination: Ted Stevens Anchorage International Airport (ANC)
- Date: January 10, 2025

2. Flight SFO-AK456
- Price: $370
- Origin: San Francisco International Airport (SFO)
- Destination: Fairbanks International Airport (FAI)
- Date: January 10, 2025

3. Flight NYC-LA101
- Price: $250
- Origin: San Francisco International Airport (SFO)
- Destination: Ted Stevens Anchorage International Airport (ANC)
- Date: January 10, 2025
"""
# What the scripted extraction agent reads off the page.
EXTRACTED = [
    {"flight_number": "SFO-AK123", "price": 350, "origin": "SFO", "destination": "ANC"},
    {"flight_number": "SFO-AK456", "price": 370, "origin": "SFO", "destination": "FAI"},
    {"flight_number": "NYC-LA101", "price": 250, "origin": "SFO", "destination": "ANC"},
]


def flight_agents(
    model: OpenAIChatModel,
) -> tuple[Agent[Deps, FlightDetails | NoFlightFound], Agent[None, SeatPreference | Failed]]:
    """The example's search agent (delegating to its extraction agent) and seat agent."""
    search_agent = Agent[Deps, FlightDetails | NoFlightFound](
        model, output_type=[FlightDetails, NoFlightFound], retries=4, system_prompt=SEARCH_PROMPT
    )
    extraction_agent = Agent(
        model, output_type=list[FlightDetails], system_prompt=EXTRACTION_PROMPT
    )

    @search_agent.tool
    async def extract_flights(ctx: RunContext[Deps]) -> list[FlightDetails]:
        """Get details of all flights."""
        result = await extraction_agent.run(ctx.deps.web_page_text, usage=ctx.usage)
        return result.output

    @search_agent.output_validator
    async def validate_output(
        ctx: RunContext[Deps], output: FlightDetails | NoFlightFound
    ) -> FlightDetails | NoFlightFound:
        if isinstance(output, NoFlightFound):
            return output
        wanted = (ctx.deps.req_origin, ctx.deps.req_destination, ctx.deps.req_date)
        if (output.origin, output.destination, output.date) != wanted:
            msg = f"the flight should go {wanted}"
            raise ModelRetry(msg)
        return output

    seat_preference_agent = Agent[None, SeatPreference | Failed](
        model, output_type=[SeatPreference, Failed], system_prompt=SEAT_PROMPT
    )
    return search_agent, seat_preference_agent


def flight_script(messages: Messages, tools: Tools, turn: int) -> str:
    """Search: extract the flights, then answer with the cheapest SFO -> ANC one of the tool's
    result; extraction: the page's flights; seat: a window seat in the front row."""
    names = tool_names(tools)
    if "extract_flights" in names:
        results = tool_results(messages)
        if not results:
            return tool_call_text("extract_flights")
        flights = [f for f in json.loads(results[0]) if f["destination"] == "ANC"]
        return tool_call_text(
            "final_result_FlightDetails", **min(flights, key=lambda f: f["price"])
        )
    if "final_result_SeatPreference" in names:
        return tool_call_text("final_result_SeatPreference", row=1, seat="A")
    return tool_call_text("final_result", response=[{**f, "date": "2025-01-10"} for f in EXTRACTED])


async def test_flight_search_then_seat_choice_are_two_trees(make_proxy: ProxyFactory) -> None:
    """The search run ends on its output tool, which nobody answers; the seat agent's run that
    the application starts next is a tree of its own, not a sub-agent of that open call."""
    proxy = await make_proxy(flight_script)
    outputs: list[Any] = []

    async def book(base_url: str, api_key: str) -> None:
        search_agent, seat_preference_agent = flight_agents(proxy_model(base_url, api_key))
        deps = Deps(
            web_page_text=FLIGHTS_PAGE,
            req_origin="SFO",
            req_destination="ANC",
            req_date=datetime.date(2025, 1, 10),
        )
        usage, limits = RunUsage(), UsageLimits(request_limit=15)
        found = await search_agent.run(
            "Find me a flight from SFO to ANC on 2025-01-10",
            deps=deps,
            usage=usage,
            usage_limits=limits,
        )
        outputs.append(found.output)
        rewarded = await proxy.session_post(api_key, "/rl/set_reward", {"reward": 1.0})
        assert rewarded.status_code == 200, rewarded.text
        seat = await seat_preference_agent.run(
            "A window seat with leg room, please", usage=usage, usage_limits=limits
        )
        outputs.append(seat.output)

    with recorded_cell(Cell(FRAMEWORK, "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, book)
        cheapest = {**EXTRACTED[2], "date": datetime.date(2025, 1, 10)}
        assert outputs == [FlightDetails(**cheapest), SeatPreference(row=1, seat="A")]
        roots = [item for item in items if item.get("parent_id") is None]
        assert len(roots) == 2, f"{len(roots)} roots: {link_kinds(items)}"
        search, seat = trees(items)
        assert_one_tree(search, ["root", "subagent", "prefix"])
        assert parent_of(search, "subagent") == search[0]["interaction_id"]
        assert_one_tree(seat, ["root"])
        assert seat[0]["messages"][0]["content"] == SEAT_PROMPT
        assert_reward_reaches_every_call(items)


# Agent delegation (docs: multi-agent applications): the joke factory.

JOKES = ["Why do programmers mix up Halloween and Christmas? Oct 31 == Dec 25.", "I/O joke."]


def joke_agents(model: OpenAIChatModel) -> Agent[None, str]:
    joke_selection_agent = Agent(
        model,
        system_prompt=(
            "Use the `joke_factory` to generate some jokes, then choose the best. "
            "You must return just a single joke."
        ),
    )
    joke_generation_agent = Agent(model, output_type=list[str])

    @joke_selection_agent.tool
    async def joke_factory(ctx: RunContext[None], count: int) -> list[str]:
        result = await joke_generation_agent.run(f"Please generate {count} jokes.", usage=ctx.usage)
        return result.output

    return joke_selection_agent


def joke_script(messages: Messages, tools: Tools, turn: int) -> str:
    """Selection: ask the factory for 2 jokes, then pick the first; generation: the jokes."""
    if "joke_factory" in tool_names(tools):
        results = tool_results(messages)
        return json.loads(results[0])[0] if results else tool_call_text("joke_factory", count=2)
    return tool_call_text("final_result", response=JOKES)


async def test_delegate_agent_is_a_subagent_of_the_tool_call(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(joke_script)
    outputs: list[str] = []

    async def tell(base_url: str, api_key: str) -> None:
        result = await joke_agents(proxy_model(base_url, api_key)).run("Tell me a joke.")
        outputs.append(result.output)

    with recorded_cell(Cell(FRAMEWORK, "inline", False, "chat", MULTI_AGENT)):
        items = await run_session(proxy, tell)
        assert outputs == [JOKES[0]]
        assert_one_tree(items, ["root", "subagent", "prefix"])
        opened = items[0]["interaction_id"]  # the call that asked for joke_factory
        assert parent_of(items, "subagent") == opened
        assert parent_of(items, "prefix") == opened
        assert_reward_reaches_every_call(items)
