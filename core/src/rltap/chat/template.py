"""rltap's Qwen-style chat template (ChatML turns, Hermes-style tool calls, `<think>` reasoning).

The template is written so that a conversation's rendering only ever grows: when message k is an
assistant turn, rendering the first k messages (no generation prompt) is a prefix of rendering
all of them. Token-in-token-out rendering depends on that, so:

- every assistant turn keeps its `reasoning_content` (Qwen3's own template drops the reasoning of
  turns before the last user query, which rewrites history);
- with `enable_thinking=False` the generation prompt ends with an empty think block
  (`<think>\\n\\n</think>\\n\\n`), and assistant turns without reasoning are rendered with
  that same empty block, so the history shows exactly the tokens the model was prompted with.

Message content may be a string, `None`, or a list of parts (`{"type": "text", "text": ...}`;
non-text parts are ignored). Tool-call arguments may be a JSON string (kept verbatim, so the
model's own text survives) or an object (serialised with `tojson`).
"""

from __future__ import annotations

__all__ = ["QWEN_CHAT_TEMPLATE"]

# Whitespace control: every tag uses `-` on both sides, so only the string literals produce output.
QWEN_CHAT_TEMPLATE = r"""
{%- macro text_of(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}
            {%- if part is string -%}
                {{- part -}}
            {%- elif part is mapping and part.get('type', 'text') == 'text' -%}
                {{- part.get('text') or '' -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- set no_thinking = enable_thinking is defined and enable_thinking is false -%}
{%- set empty_think = '<think>\n\n</think>\n\n' -%}
{%- set leading_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools or leading_system -%}
    {{- '<|im_start|>system\n' -}}
    {%- if leading_system -%}
        {{- text_of(messages[0].content) -}}
        {%- if tools -%}
            {{- '\n\n' -}}
        {%- endif -%}
    {%- endif -%}
    {%- if tools -%}
        {{- '# Tools\n\nYou may call the functions described below. '
            + 'Their JSON signatures are listed between <tools> and </tools>:\n<tools>' -}}
        {%- for tool in tools -%}
            {{- '\n' + (tool | tojson) -}}
        {%- endfor -%}
        {{- '\n</tools>\n\nTo call a function, write one JSON object per call between '
            + '<tool_call> and </tool_call>:\n<tool_call>\n'
            + '{"name": <function name>, "arguments": <arguments object>}\n</tool_call>' -}}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- set content = text_of(message.content) -%}
    {%- if message.role == 'system' -%}
        {%- if not loop.first -%}
            {{- '<|im_start|>system\n' + content + '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif message.role == 'user' -%}
        {{- '<|im_start|>user\n' + content + '<|im_end|>\n' -}}
    {%- elif message.role == 'assistant' -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- if message.reasoning_content is string and message.reasoning_content -%}
            {{- '<think>\n' + message.reasoning_content.strip('\n') + '\n</think>\n\n' -}}
        {%- elif no_thinking -%}
            {{- empty_think -}}
        {%- endif -%}
        {{- content -}}
        {%- for call in message.tool_calls or [] -%}
            {%- set fn = call.function if call.function is defined else call -%}
            {%- if content or not loop.first -%}
                {{- '\n' -}}
            {%- endif -%}
            {{- '<tool_call>\n{"name": ' + (fn.name | tojson) + ', "arguments": ' -}}
            {%- if fn.arguments is string -%}
                {{- fn.arguments -}}
            {%- elif fn.arguments is mapping -%}
                {{- fn.arguments | tojson -}}
            {%- else -%}
                {{- '{}' -}}
            {%- endif -%}
            {{- '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- else -%}
        {{- raise_exception('unsupported message role: ' + message.role | string) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if no_thinking -%}
        {{- empty_think -}}
    {%- endif -%}
{%- endif -%}
""".strip()
