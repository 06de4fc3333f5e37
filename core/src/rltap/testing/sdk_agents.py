"""Tool-using agents written with the plain `openai` and `anthropic` SDKs.

They are the matrix's baseline cells (no framework in between) and a template for users whose
agent is plain SDK code: call the model, run the tools it asks for, send the results back, until
it answers. The tool is `add(a, b)`.
"""

from __future__ import annotations

import json
from typing import Any

from rltap.adapter import AgentAdapter, Connection

__all__ = ["ADD_TOOL", "AnthropicSDKAgent", "OpenAISDKAgent", "add", "anthropic_client"]

ADD_TOOL = {
    "name": "add",
    "description": "Add two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}
MAX_TURNS = 6


def add(a: int, b: int) -> int:
    return a + b


def _call_tool(name: str, arguments: str | dict[str, Any]) -> str:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    if name != "add":
        return f"unknown tool {name}"
    return str(add(int(args["a"]), int(args["b"])))


class OpenAISDKAgent(AgentAdapter):
    """`AsyncOpenAI` on the proxy; `wire_format` "chat" (Chat Completions) or "responses"."""

    requirement = "openai>=1.100"

    def __init__(self, *, wire_format: str = "chat", stream: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wire_format = wire_format
        self.stream = stream

    def _client(self, connection: Connection) -> Any:
        import openai

        return openai.AsyncOpenAI(
            base_url=connection.base_url,
            api_key=connection.api_key,
            http_client=connection.http_client,
            max_retries=0,
        )

    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        client = self._client(connection)
        if self.wire_format == "responses":
            return await self._responses(client, data["question"])
        return await self._chat(client, data["question"])

    async def _chat(self, client: Any, question: str) -> str:
        messages: list[Any] = [{"role": "user", "content": question}]
        tools = [{"type": "function", "function": ADD_TOOL}]
        for _ in range(MAX_TURNS):
            if self.stream:
                async with client.chat.completions.stream(
                    model=self.model, messages=messages, tools=tools
                ) as events:
                    message = (await events.get_final_completion()).choices[0].message
            else:
                completion = await client.chat.completions.create(
                    model=self.model, messages=messages, tools=tools
                )
                message = completion.choices[0].message
            if not message.tool_calls:
                return str(message.content or "")
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = _call_tool(call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return ""

    async def _responses(self, client: Any, question: str) -> str:
        items: list[Any] = [{"role": "user", "content": question}]
        tools = [{"type": "function", **ADD_TOOL}]
        for _ in range(MAX_TURNS):
            if self.stream:
                async with client.responses.stream(
                    model=self.model, input=items, tools=tools
                ) as events:
                    response = await events.get_final_response()
            else:
                response = await client.responses.create(model=self.model, input=items, tools=tools)
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                return str(response.output_text)
            items += [item.model_dump(exclude_none=True) for item in response.output]
            for call in calls:
                output = _call_tool(call.name, call.arguments)
                items.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": output}
                )
        return ""


def anthropic_client(connection: Connection) -> Any:
    """An `AsyncAnthropic` on the proxy of `connection`, without retries."""
    import anthropic

    # anthropic 2.x takes an httpx2 client: the workflow's httpx client is not passed on.
    return anthropic.AsyncAnthropic(
        base_url=connection.root_url, api_key=connection.api_key, max_retries=0
    )


class AnthropicSDKAgent(AgentAdapter):
    """`AsyncAnthropic` on the proxy's /v1/messages."""

    requirement = "anthropic>=0.40"

    def __init__(self, *, stream: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream

    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        client = anthropic_client(connection)
        messages: list[Any] = [{"role": "user", "content": data["question"]}]
        tools: list[Any] = [
            {
                "name": "add",
                "description": ADD_TOOL["description"],
                "input_schema": ADD_TOOL["parameters"],
            }
        ]
        for _ in range(MAX_TURNS):
            if self.stream:
                async with client.messages.stream(
                    model=self.model, max_tokens=256, messages=messages, tools=tools
                ) as events:
                    message = await events.get_final_message()
            else:
                message = await client.messages.create(
                    model=self.model, max_tokens=256, messages=messages, tools=tools
                )
            uses = [block for block in message.content if block.type == "tool_use"]
            if not uses:
                return "".join(block.text for block in message.content if block.type == "text")
            messages.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in message.content],
                }
            )
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": _call_tool(use.name, use.input),
                }
                for use in uses
            ]
            messages.append({"role": "user", "content": results})
        return ""
