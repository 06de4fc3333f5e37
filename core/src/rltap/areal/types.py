"""`areal.experimental.openai.types`: the recorded interaction, with AReaL's `completion` and
`response`.

rltap's interaction (`rltap.record.types.InteractionWithTokenLogpReward`) has AReaL's fields
(`model_response`, `reward`, `parent`, `messages`, `output_message_list`, `chat_template_type`)
as keywords, and `to_tensor_dict()` gives AReaL's tensors (int32 ids, masks and versions). This
subclass adds the two AReaL names after a wire API, as keywords and attributes: `completion`,
the Chat Completions reply (the SDK's `ChatCompletion`), and `response`, the Responses reply
(its `Response`), with `is_completion` and `is_response`. Both live in the record's
`reply_bodies` under the API's name, so no state is added: `rltap.areal`'s cache and proxy
client hand out their interactions as this class, the same objects the session records.
"""

from __future__ import annotations

from typing import Any, cast

from pydantic import BaseModel

from rltap.record.types import InteractionWithTokenLogpReward as RecordedInteraction

__all__ = ["InteractionWithTokenLogpReward", "as_areal"]

# The names of the wire APIs AReaL's fields stand for (`rltap.protocols`' `ApiSpec.name`).
_CHAT = "chat"
_RESPONSES = "responses"


class InteractionWithTokenLogpReward(RecordedInteraction):
    """AReaL's recorded interaction: rltap's, plus `completion` and `response`."""

    def __init__(self, *, completion: Any = None, response: Any = None, **fields: Any) -> None:
        super().__init__(**fields)
        if completion is not None:
            self.completion = completion
        if response is not None:
            self.response = response

    @property
    def completion(self) -> Any:
        """The reply of `/v1/chat/completions` as the SDK's `ChatCompletion`, or None."""
        from openai.types.chat import ChatCompletion

        return _sdk_object(ChatCompletion, self.reply_bodies.get(_CHAT))

    @completion.setter
    def completion(self, value: Any) -> None:
        _keep(self.reply_bodies, _CHAT, value)

    @property
    def response(self) -> Any:
        """The reply of `/v1/responses` as the SDK's `Response`, or None."""
        from openai.types.responses import Response

        return _sdk_object(Response, self.reply_bodies.get(_RESPONSES))

    @response.setter
    def response(self, value: Any) -> None:
        _keep(self.reply_bodies, _RESPONSES, value)

    @property
    def is_completion(self) -> bool:
        return _CHAT in self.reply_bodies

    @property
    def is_response(self) -> bool:
        return _RESPONSES in self.reply_bodies


def as_areal(interaction: RecordedInteraction) -> InteractionWithTokenLogpReward:
    """`interaction` as AReaL's class: the same object, so the session and the cache holding it
    see one interaction. Anything but rltap's own class is returned as given (AReaL's callers
    may store their own objects, its tests MagicMocks)."""
    if type(interaction) is RecordedInteraction:
        # The subclass adds properties only: the object's layout is the record's.
        interaction.__class__ = InteractionWithTokenLogpReward
    return cast(InteractionWithTokenLogpReward, interaction)


def _sdk_object(model: type[BaseModel], body: Any) -> Any:
    """A body as sent, read as the SDK reads it (leniently); anything else as it was set."""
    return model.model_construct(**body) if isinstance(body, dict) else body


def _keep(bodies: dict[str, Any], api: str, value: Any) -> None:
    """Keep `value` as the body of `api`'s reply: an SDK object as its JSON body, which the API
    may send again (a retrieved response); None forgets it."""
    if value is None:
        bodies.pop(api, None)
    elif isinstance(value, BaseModel):
        bodies[api] = value.model_dump(mode="json", exclude_unset=True)
    else:
        bodies[api] = value
