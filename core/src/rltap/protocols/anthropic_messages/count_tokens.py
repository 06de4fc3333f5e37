"""`POST /v1/messages/count_tokens`: Anthropic's token count of a Messages request.

The count is exact: the request's prompt as its `/v1/messages` call would render it in the
caller's session (`Session.count_tokens`: the same history, parent, chat template and tools), so
it equals that call's `usage.input_tokens`. Nothing is generated or recorded. The body is a
Messages body (`max_tokens` and the sampling fields may be left out); the reply is Anthropic's
`{"input_tokens": N}`. CAMEL's Anthropic backend calls it before every step, the anthropic SDK
as `client.messages.count_tokens(...)`.
"""

from __future__ import annotations

from typing import Any

from rltap.protocols.anthropic_messages.request import MessageCreateParams, to_canonical
from rltap.protocols.operation import Operation, OperationCall

__all__ = ["COUNT_TOKENS"]


async def _count_tokens(call: OperationCall) -> dict[str, Any]:
    canonical = to_canonical(call.body)
    canonical.agent = call.agent
    return {"input_tokens": call.session.count_tokens(canonical)}


COUNT_TOKENS = Operation(
    method="POST",
    path="/v1/messages/count_tokens",
    summary="Anthropic Messages: count tokens",
    handle=_count_tokens,
    body=MessageCreateParams,
)
