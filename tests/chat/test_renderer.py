"""ChatRenderer with rltap's Qwen-style template: concat (token-in, token-out) == hf rendering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltap.chat.renderer import ChatRenderer, ParentTokens, RenderedPrompt, RenderMode
from rltap.record.errors import InvalidRequest
from rltap.record.types import InteractionWithTokenLogpReward, ModelResponse

Message = dict[str, Any]

IM_END = 151645
ENDOFTEXT = 151643
NEWLINE = 198

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time of a timezone.",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    },
]


def _call(name: str, arguments: str) -> Message:
    return {
        "id": f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


SYSTEM = {"role": "system", "content": "You are terse."}
ASK = {"role": "user", "content": "What's the weather in Paris?"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [_call("get_weather", '{"city": "Paris"}')],
}
PARALLEL = {
    "role": "assistant",
    "content": "Let me check both.",
    "tool_calls": [_call("get_weather", '{"city": "Paris"}'), _call("get_time", '{"tz": "CET"}')],
}


def _tool(content: str, name: str = "get_weather") -> Message:
    return {"role": "tool", "tool_call_id": f"call_{name}", "content": content}


@pytest.fixture(scope="module")
def renderer(qwen_tokenizer: Any) -> ChatRenderer:
    return ChatRenderer(qwen_tokenizer, mode="concat")


def _generate(
    renderer: ChatRenderer,
    history: list[Message],
    reply: Message,
    tools: list[Message] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> tuple[list[int], list[int]]:
    """A realistic call: the prompt for `history`, and `reply` as the model would emit it.

    The output is the hf rendering's ids of the reply up to and including `<|im_end|>` (the
    newline after it is the template's, not the model's).
    """
    prompt = renderer.render_full(history, tools=tools, template_kwargs=kwargs)
    whole = renderer.render_full(
        [*history, reply], tools=tools, add_generation_prompt=False, template_kwargs=kwargs
    )
    assert whole[: len(prompt)] == prompt, "the generation prompt must prefix the reply's turn"
    assert whole[-2:] == [IM_END, NEWLINE]
    return prompt, whole[len(prompt) : -1]


CONTINUATIONS = [
    pytest.param(
        [SYSTEM, {"role": "user", "content": "Hi!"}],
        {"role": "assistant", "content": "Hello. What do you need?"},
        [{"role": "user", "content": "Nothing, thanks."}],
        None,
        None,
        id="plain-multi-turn",
    ),
    pytest.param(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}],
            }
        ],
        {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        [{"role": "user", "content": [{"type": "text", "text": "Bye."}]}],
        None,
        None,
        id="content-parts",
    ),
    pytest.param(
        [ASK],
        CALL,
        [_tool('{"temp_c": 21}')],
        TOOLS,
        None,
        id="tool-call-then-result",
    ),
    pytest.param(
        [SYSTEM, ASK],
        PARALLEL,
        [_tool('{"temp_c": 21}'), _tool("14:05", "get_time")],
        TOOLS,
        None,
        id="parallel-calls-system-with-tools",
    ),
    pytest.param(
        [ASK],
        {**CALL, "tool_calls": [_call("get_weather", '{"city": "Paris"}')] * 3},
        [_tool("sunny"), _tool("cloudy"), _tool("rain"), {"role": "user", "content": "And?"}],
        TOOLS,
        None,
        id="several-results-then-user",
    ),
    pytest.param(
        [{"role": "user", "content": "2+2?"}],
        {"role": "assistant", "reasoning_content": "Two plus two.", "content": "4"},
        [{"role": "user", "content": "3+3?"}],
        None,
        None,
        id="reasoning",
    ),
    pytest.param(
        [ASK],
        {**CALL, "reasoning_content": "Need the tool."},
        [_tool("sunny")],
        TOOLS,
        {"enable_thinking": True},
        id="reasoning-tool-call",
    ),
    pytest.param(
        [SYSTEM, {"role": "user", "content": "Hi"}],
        {"role": "assistant", "content": "Hello."},
        [{"role": "user", "content": "Bye."}],
        None,
        {"enable_thinking": False},
        id="thinking-disabled",
    ),
]


@pytest.mark.parametrize(("history", "reply", "new", "tools", "kwargs"), CONTINUATIONS)
def test_concat_equals_full_rendering(
    renderer: ChatRenderer,
    history: list[Message],
    reply: Message,
    new: list[Message],
    tools: list[Message] | None,
    kwargs: dict[str, Any] | None,
) -> None:
    prompt, output = _generate(renderer, history, reply, tools, kwargs)
    messages = [*history, reply, *new]
    parent = ParentTokens(token_ids=prompt + output, message_count=len(history) + 1)

    rendered = renderer.render(messages, tools=tools, parent=parent, template_kwargs=kwargs)

    assert rendered.input_ids == renderer.render_full(messages, tools=tools, template_kwargs=kwargs)
    assert rendered.input_ids[: len(prompt) + len(output)] == prompt + output
    assert (rendered.reused_len, rendered.closing_len) == (len(prompt) + len(output), 0)


def test_a_reply_containing_the_end_of_turn_text_is_not_cut_by_a_remembered_count(
    qwen_tokenizer: Any,
) -> None:
    renderer = ChatRenderer(qwen_tokenizer, mode="concat")  # nothing remembered yet
    history = [SYSTEM, {"role": "user", "content": "Hi"}]
    for text in ("Hello.", "Hello.<|im_end|> and more"):  # same shape, then the marker itself
        reply = {"role": "assistant", "content": text}
        prompt, output = _generate(renderer, history, reply)
        messages = [*history, reply, {"role": "user", "content": "Bye."}]
        parent = ParentTokens(token_ids=prompt + output, message_count=3)
        assert renderer.render(messages, parent=parent).input_ids == renderer.render_full(messages)


def test_parent_interaction_is_accepted(renderer: ChatRenderer) -> None:
    history = [ASK]
    prompt, output = _generate(renderer, history, CALL, TOOLS)
    parent = InteractionWithTokenLogpReward(
        model_response=ModelResponse(
            input_tokens=prompt,
            output_tokens=output,
            output_logprobs=[-1.0] * len(output),
            output_versions=[0] * len(output),
        ),
        messages=history,
        output_message_list=[CALL],
        tools=TOOLS,
    )
    messages = [*history, CALL, _tool("sunny")]

    rendered = renderer.render(messages, tools=TOOLS, parent=parent)

    assert rendered.input_ids == renderer.render_full(messages, tools=TOOLS)
    assert ParentTokens.of(parent) == ParentTokens(token_ids=prompt + output, message_count=2)


def test_episode_chains_concat_calls(renderer: ChatRenderer) -> None:
    """Four calls, each continuing the previous one's concat prompt: still the hf rendering."""
    turns: list[tuple[Message, list[Message]]] = [
        (CALL, [_tool("sunny")]),
        (PARALLEL, [_tool("sunny"), _tool("09:00", "get_time")]),
        ({"role": "assistant", "content": "Sunny, 9am."}, [{"role": "user", "content": "Thanks"}]),
        ({"role": "assistant", "content": "Welcome."}, []),
    ]
    messages: list[Message] = [SYSTEM, ASK]
    parent: ParentTokens | None = None
    for reply, new in turns:
        prompt = renderer.render(messages, tools=TOOLS, parent=parent).input_ids
        assert prompt == renderer.render_full(messages, tools=TOOLS)
        _, output = _generate(renderer, messages, reply, TOOLS)
        messages = [*messages, reply, *new]
        parent = ParentTokens(token_ids=prompt + output, message_count=len(messages) - len(new))


def test_concat_keeps_the_models_own_tokenization(renderer: ChatRenderer) -> None:
    """Token-in, token-out: the model's ids are reused even where re-tokenizing would differ."""
    history = [{"role": "user", "content": "Say hello."}]
    prompt = renderer.render_full(history)
    hello = renderer.tokenizer.encode("Hello")
    odd_output = [*renderer.tokenizer.encode("Hel"), *renderer.tokenizer.encode("lo"), IM_END]
    assert odd_output[:-1] != hello
    messages = [
        *history,
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Again"},
    ]
    parent = ParentTokens(token_ids=prompt + odd_output, message_count=2)

    concat = renderer.render(messages, parent=parent).input_ids
    hf = ChatRenderer(renderer.tokenizer, mode=RenderMode.HF).render(messages, parent=parent)

    assert concat[: len(prompt) + len(odd_output)] == prompt + odd_output
    assert hf.input_ids == renderer.render_full(messages) != concat
    assert hf.reused_len == 0


@pytest.mark.parametrize(
    ("cut", "stop"),
    [
        pytest.param(3, [], id="length"),
        pytest.param(3, [ENDOFTEXT], id="stopped-on-endoftext"),
    ],
)
def test_open_turn_is_closed_with_end_of_turn(
    renderer: ChatRenderer, cut: int, stop: list[int]
) -> None:
    """A parent without `<|im_end|>` at the end gets it appended, as prompt tokens of the child."""
    history = [{"role": "user", "content": "Count to ten."}]
    reply_text = "One, two, three, four, five"
    prompt, output = _generate(renderer, history, {"role": "assistant", "content": reply_text})
    truncated = output[: -cut - 1]  # max_tokens hit: the reply is cut, no <|im_end|>
    truncated_text = renderer.decode(truncated)
    assert renderer.tokenizer.encode(truncated_text) == truncated
    new = [{"role": "user", "content": "Go on."}]
    messages = [*history, {"role": "assistant", "content": truncated_text}, *new]
    parent = ParentTokens(token_ids=[*prompt, *truncated, *stop], message_count=2)

    rendered = renderer.render(messages, parent=parent)

    reused = len(prompt) + len(truncated) + len(stop)
    assert rendered.input_ids[:reused] == parent.token_ids
    assert rendered.input_ids[reused : reused + 1] == [IM_END]
    assert (rendered.reused_len, rendered.closing_len) == (reused, 1)
    if not stop:  # a cut reply reads like an assistant turn with the truncated text
        assert rendered.input_ids == renderer.render_full(messages)
    else:
        assert rendered.input_ids[reused + 1 :] == renderer.render_full(messages)[reused:]


def test_without_parent_or_in_hf_mode_renders_fully(qwen_tokenizer: Any) -> None:
    messages = [SYSTEM, ASK]
    full = ChatRenderer(qwen_tokenizer, mode="hf").render(messages, tools=TOOLS)
    assert full == RenderedPrompt(
        input_ids=ChatRenderer(qwen_tokenizer).render_full(messages, tools=TOOLS)
    )
    assert full.input_ids == qwen_tokenizer.apply_chat_template(
        messages, tools=TOOLS, add_generation_prompt=True, return_dict=False
    )


def test_template_without_turn_markers_falls_back_to_full_rendering(qwen_tokenizer: Any) -> None:
    template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    renderer = ChatRenderer(qwen_tokenizer, chat_template=template)
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    parent = ParentTokens(token_ids=[1, 2, 3], message_count=2)
    rendered = renderer.render([*messages, {"role": "user", "content": "c"}], parent=parent)
    assert rendered.reused_len == 0
    assert renderer.decode(rendered.input_ids) == "user: a\nassistant: b\nuser: c\n"


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([ASK], id="parent-covers-more-messages"),
        pytest.param(
            [ASK, {"role": "assistant", "content": "x"}, {"role": "robot", "content": "beep"}],
            id="unknown-role-in-a-new-message",
        ),
    ],
)
def test_invalid_requests(renderer: ChatRenderer, messages: list[Message]) -> None:
    parent = ParentTokens(token_ids=[IM_END], message_count=2)
    with pytest.raises(InvalidRequest):
        renderer.render(messages, parent=parent)


def test_template_text_for_tools_and_thinking(renderer: ChatRenderer) -> None:
    text = renderer.render_text(
        [ASK, CALL, _tool("sunny")], tools=TOOLS[:1], template_kwargs={"enable_thinking": False}
    )
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert '\n<tools>\n{"type": "function", "function": {"name": "get_weather"' in text
    assert text.endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    with_dict_args = renderer.render_text(
        [{**CALL, "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": [2]}}}]}],
        add_generation_prompt=False,
    )
    assert '{"name": "f", "arguments": {"b": 1, "a": [2]}}' in with_dict_args


def test_stop_ids_and_decoding(qwen_tokenizer: Any, tiny_model_dir: Path) -> None:
    renderer = ChatRenderer(qwen_tokenizer)
    assert renderer.end_of_turn_ids == (IM_END,)
    assert renderer.stop_token_ids == (IM_END,)
    from_model = ChatRenderer.from_pretrained(tiny_model_dir)
    assert from_model.stop_token_ids == (IM_END, ENDOFTEXT)
    ids = qwen_tokenizer.encode('<think>\nok\n</think>\n\n<tool_call>\n{"name": "f"}\n</tool_call>')
    assert from_model.output_text([*ids, ENDOFTEXT]) == qwen_tokenizer.decode(ids)
    assert from_model.strip_stop([*ids, IM_END]) == ids
    assert from_model.strip_stop(ids) == ids
    assert renderer.decode([151644, 9707, IM_END], skip_special_tokens=True) == "Hello"


def test_stream_decoder_never_splits_a_character(renderer: ChatRenderer) -> None:
    text = "naïve 👩‍👩‍👧 東京 done"
    ids = renderer.tokenizer.encode(text)
    decoder = renderer.stream_decoder()
    deltas = [decoder.push([token]) for token in ids]
    deltas.append(decoder.flush())
    assert "".join(deltas) == decoder.text == text
    assert not any("\ufffd" in delta for delta in deltas)
    assert "" in deltas  # some character did span several tokens


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(min_value=0, max_value=151664), max_size=24), skip=st.booleans())
def test_decoding_gives_the_transformers_text(
    renderer: ChatRenderer, qwen_tokenizer: Any, ids: list[int], skip: bool
) -> None:
    expected = qwen_tokenizer.decode(ids, skip_special_tokens=skip)
    assert renderer.decode(ids, skip_special_tokens=skip) == expected
    decoder = renderer.stream_decoder()
    assert "".join([*(decoder.push([i]) for i in ids), decoder.flush()]) == (
        qwen_tokenizer.decode(ids)
    )


def test_every_token_alone_decodes_as_the_tokenizer_decodes_it(
    renderer: ChatRenderer, qwen_tokenizer: Any
) -> None:
    for token_id in range(len(qwen_tokenizer)):
        for skip in (False, True):
            expected = qwen_tokenizer.decode([token_id], skip_special_tokens=skip)
            assert renderer.decode([token_id], skip_special_tokens=skip) == expected, token_id


def test_ids_the_tokenizer_does_not_know_get_its_answer(
    renderer: ChatRenderer, qwen_tokenizer: Any
) -> None:
    unknown = [9707, 10**6]
    assert renderer.decode(unknown) == qwen_tokenizer.decode(unknown)
    with pytest.raises(OverflowError):
        qwen_tokenizer.decode([9707, -1])
    with pytest.raises(OverflowError):
        renderer.decode([9707, -1])
