"""`areal.experimental.openai.types`: the recorded interaction is rltap's own class.

rltap's `InteractionWithTokenLogpReward` has AReaL's fields (`model_response`, `reward`,
`parent`, `messages`, `output_message_list`, `completion`, `response`, `chat_template_type`) as
keywords, and `to_tensor_dict()` gives AReaL's tensors (int32 ids, masks and versions).
"""

from __future__ import annotations

from rltap.record.types import InteractionWithTokenLogpReward

__all__ = ["InteractionWithTokenLogpReward"]
