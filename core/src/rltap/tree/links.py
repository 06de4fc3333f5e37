"""How a call is linked into its session's tree: its parent, the kind of link, its agent.

Real agents do not only append to their history: they drop their tools for a last answer, trim
or summarize old turns, hand the conversation to another agent, or call another agent as a tool.
Each of these stays linked, so one episode is one tree and the reward of its answer reaches every
call that led to it. The procedure is deterministic, over canonical messages
(`rltap.tree.canonical`), and looks at the session's complete interactions only. In order, the
first rule that applies:

1. `prefix`: a complete interaction's messages plus its reply are a prefix of the call's messages
   (the longest one; ties to the last inserted), under the same tool set, and by the same agent
   when the client names agents. Its tokens continue the parent's (concat export, token-in
   token-out rendering). Cost: O(M) for M messages, one hash-chain pass and a dictionary lookup
   per prefix (`InteractionCache`).
2. `rewrite` or `handoff`: the call's messages contain the reply of a complete interaction, as an
   assistant message, but not after that interaction's exact conversation (its tools changed,
   earlier messages were trimmed, summarized or edited, another system prompt came in front).
   The parent is the interaction whose reply stands latest in the call's messages (the most
   recent state of the conversation the call carries). It is a `handoff` when another agent made
   the call (the `X-Rltap-Agent` header differs; without one, the system prompt differs from the
   parent's and from those up the parent's chain of rewrites, all its agent's), else a `rewrite`.
   A call that says it rewrites its conversation (a compaction, `/v1/responses/compact`) is a
   `rewrite` whatever its prompt, by the parent's agent. Cost: O(K) canonical hashes, K the
   messages after the latest reply found (at most M), and a dictionary lookup each.
3. `handoff` or `subagent`: some complete interaction asked for tool calls and nothing has
   continued it yet (its tool call is open), and another agent makes this call. It is a `handoff`
   when the open call is a hand-off tool (`transfer_to_*`, `handoff_to_*`: the Agents SDK's,
   LangGraph's and AutoGen Swarm's hand-offs); a `subagent` when the call is plausibly that
   tool's work: its messages hold the words of what the tool was given (its longest value's;
   an agent run as a tool), or when its client names it a helper of the open call's agent
   (`X-Rltap-Agent: <agent>/<helper>`, as the LangChain adapter names a middleware's calls).
   Otherwise the call is not the tool's work and the open call closes. The parent is the
   interaction opened last. A tool call stays open only while the session works under it: a
   call that continues it closes it (the tool answered), and so does any call linked outside its
   subtree (a root, a continuation of another conversation): the session moved on, so the tool
   call will never be answered, and a later call of another agent is not its sub-agent. An
   output tool (`final_result`, `final_answer`: pydantic-ai's and smolagents' way to end a run
   with a typed answer) is never open. Cost: O(1) to find, O(open calls) to keep the set, which
   this keeps small, and O(M) to read the call's words once.
4. `carry`: the call carries the reply of a complete interaction in another form (text
   appended, tool calls re-rendered as text, relayed as a user message, inside a transcript:
   `rltap.tree.carry` says what counts). Its tokens do not continue the parent's. The same rule runs
   on a `prefix` call's new messages that are `user` messages with a `name` (another agent
   speaking into the conversation, AutoGen's group chats): when they carry a reply completed
   after the `prefix` parent's, the call continues that later reply, by `carry`, so that a round
   of a group chat is one chain. When the call carries its own agent's reply, and calls of other
   agents hang below that reply by `carry` (a smolagents CodeAgent calls a managed agent from
   its code: no tool call was open), those agents worked for the reply's call while its agent
   waited: they are relinked `subagent`, credited from the continuation like any sub-agent.
   Cost: O(M) (`rltap.tree.carry`).
5. `root`: none of these; the call starts a conversation of its own.

The agent id is the `X-Rltap-Agent` header when the client sends one (the adapters set it where
the framework names its agents; `agent_header_value` percent-encodes a name that is not ASCII).
Without one, a `prefix` or `rewrite` child keeps its parent's agent (the same agent dropping its
tools is still that agent); any other call gets an id derived from its system prompt and tool set
(`agent-` and 12 hex digits), which tells apart two agents whose prompts agree but whose tools
differ.

Rewards flow along every link kind (`rltap.tree.rewards`: each kind with its own factor, and a
sub-agent credited from the continuation its answer feeds); token sequences join only along
`prefix` links (`rltap.tree.export`).
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

from rltap.record.errors import InvalidRequest
from rltap.record.types import InteractionWithTokenLogpReward, Link
from rltap.tree.canonical import canonical_message
from rltap.tree.carry import CarryIndex, conversation_text, tool_function, words

__all__ = [
    "AGENT_HEADER",
    "LinkIndex",
    "agent_from_header",
    "agent_header_value",
    "choose_link",
    "derive_agent_id",
    "names_agent",
    "same_agent_prompt",
    "same_system_prompt",
]

AGENT_HEADER = "x-rltap-agent"
_AGENT_MAX_CHARS = 256
# A header value is printable ASCII: everything else (and "%" itself) is percent-encoded UTF-8.
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


def agent_header_value(name: str) -> str | None:
    """The `X-Rltap-Agent` value that names the agent `name` (any text: what a header cannot
    carry is percent-encoded UTF-8); None for a blank or overlong name, which names nobody."""
    name = name.strip()
    if not name or len(name) > _AGENT_MAX_CHARS:
        return None
    return urllib.parse.quote(name, safe=_HEADER_SAFE)


_SYSTEM_ROLES = frozenset({"system", "developer"})


def names_agent(headers: Mapping[str, Any] | None) -> bool:
    """Whether `headers` name an agent already: an adapter leaves a user's own header alone."""
    return any(key.lower() == AGENT_HEADER for key in headers or {})


def agent_from_header(value: str | None) -> str | None:
    """The agent a client names in its `X-Rltap-Agent` header (None: unnamed), percent-escapes
    decoded (`agent_header_value`); a 400 for an empty or overlong name, or bad UTF-8."""
    if value is None:
        return None
    try:
        agent = urllib.parse.unquote(value, errors="strict").strip()
    except UnicodeDecodeError:
        msg = "the X-Rltap-Agent header must be percent-encoded UTF-8"
        raise InvalidRequest(msg, param="X-Rltap-Agent") from None
    if not agent or len(agent) > _AGENT_MAX_CHARS:
        msg = f"the X-Rltap-Agent header must name an agent in 1 to {_AGENT_MAX_CHARS} characters"
        raise InvalidRequest(msg, param="X-Rltap-Agent")
    return agent


def _system_prompt(messages: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """The leading system (or developer) messages, canonical."""
    prompt = []
    for message in messages:
        if message.get("role") not in _SYSTEM_ROLES:
            break
        prompt.append(canonical_message(message))
    return prompt


def same_system_prompt(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    return _system_prompt(a) == _system_prompt(b)


def derive_agent_id(messages: Sequence[Mapping[str, Any]], context: bytes | None) -> str:
    """An agent id from the system prompt and the tool set (`tools_context`) of a call."""
    digest = hashlib.blake2b(digest_size=6)
    for part in _system_prompt(messages):
        digest.update(len(part).to_bytes(8, "little") + part)
    digest.update(b"\x00tools\x00" + (context or b""))
    return f"agent-{digest.hexdigest()}"


def _reply_key(canonical: bytes) -> bytes:
    return hashlib.blake2b(canonical, digest_size=16).digest()


# Tools that end a run with its typed answer: nothing ever answers them (rule 3).
_OUTPUT_TOOL = re.compile(r"final_(result|answer|output)(_\w+)?", re.IGNORECASE)
# Tools that hand the conversation to another agent (rule 3).
_HANDOFF_TOOL = re.compile(r"(transfer|handoff|hand_off)_to_\w+", re.IGNORECASE)


def _tool_calls(interaction: InteractionWithTokenLogpReward) -> list[Mapping[str, Any]]:
    calls: list[Mapping[str, Any]] = []
    for message in interaction.output_message_list or ():
        calls.extend(c for c in message.get("tool_calls") or () if isinstance(c, Mapping))
    return calls


def _tool_name(call: Mapping[str, Any]) -> str:
    name = tool_function(call).get("name")
    return name if isinstance(name, str) else ""


def _leaves(value: Any) -> Iterator[str]:
    """The scalar values inside a tool call's arguments, however nested."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif value is not None:
        yield str(value)


def _given_words(call: Mapping[str, Any]) -> list[str]:
    """The words of what a tool call was given: its longest value's, however nested (a task,
    a query, a message's content), or all of them when its arguments are not JSON."""
    raw = tool_function(call).get("arguments")
    try:
        arguments = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
    except orjson.JSONDecodeError:
        arguments = raw
    return max((words(leaf) for leaf in _leaves(arguments)), key=len, default=[])


class LinkIndex:
    """What rules 2 to 4 look up: complete interactions by their replies, and the open ones.

    Not thread-safe by itself: `InteractionCache` holds its lock around every call.
    """

    def __init__(self) -> None:
        self._replies: dict[bytes, str] = {}
        # Interactions whose tool calls nothing has continued yet, in the order they completed.
        self._open: dict[str, None] = {}
        # Each interaction's nearest ancestor-or-self that had an open tool call when the
        # interaction was linked (only those that have one).
        self._opener: dict[str, str] = {}
        self._carry = CarryIndex()
        self._completed: dict[str, int] = {}  # completion order
        # Calls of other agents that hang below a call by `carry`, by that call (rule 4).
        self._carried_by_others: dict[str, list[InteractionWithTokenLogpReward]] = {}

    def completed(
        self, interaction: InteractionWithTokenLogpReward, canonicals: Sequence[bytes]
    ) -> None:
        """Index a complete interaction's reply (the last one completed wins a tie);
        `canonicals` are its output messages' `canonical_message`s."""
        interaction_id = interaction.interaction_id
        outputs = interaction.output_message_list or []
        for message, canonical in zip(outputs, canonicals, strict=True):
            if message.get("role") == "assistant":
                self._replies[_reply_key(canonical)] = interaction_id
        names = [_tool_name(call) for call in _tool_calls(interaction)]
        if any(not _OUTPUT_TOOL.fullmatch(name) for name in names):
            self._open[interaction_id] = None
        self._carry.completed(interaction_id, outputs)
        self._completed[interaction_id] = len(self._completed)

    def linked(
        self, interaction: InteractionWithTokenLogpReward, parent_id: str | None, link: Link
    ) -> None:
        """A call was linked: the tool calls it continues are answered, and those it does not
        descend from are closed (rule 3: the session moved on without them).

        Cost: O(open calls), which this keeps few."""
        interaction_id = interaction.interaction_id
        parent = interaction.parent
        if link is Link.CARRY and parent is not None and parent.agent_id != interaction.agent_id:
            self._carried_by_others.setdefault(parent.interaction_id, []).append(interaction)
        opener = parent_id if parent_id in self._open else self._opener.get(parent_id or "")
        if opener is not None:
            self._opener[interaction_id] = opener
        still_open = set()
        while opener is not None:
            still_open.add(opener)
            opener = self._opener.get(opener)
        if link is not Link.SUBAGENT:
            still_open.discard(parent_id or "")
        if self._open:
            self._open = {key: None for key in self._open if key in still_open}

    def latest_reply(self, messages: Sequence[Mapping[str, Any]]) -> str | None:
        """The interaction whose reply stands latest in `messages` (rule 2), or None."""
        for message in reversed(messages):
            if message.get("role") != "assistant":
                continue
            interaction_id = self._replies.get(_reply_key(canonical_message(message)))
            if interaction_id is not None:
                return interaction_id
        return None

    def open_call(self) -> str | None:
        """The interaction whose tool call was opened last and is still open (rule 3)."""
        return next(reversed(self._open), None)

    def carried(
        self,
        interactions: Mapping[str, InteractionWithTokenLogpReward],
        messages: Sequence[Mapping[str, Any]],
        agent: str | None,
        *,
        relayed: bool = False,
    ) -> str | None:
        """The interaction whose reply `messages` carry in another form (rule 4), or None."""
        return self._carry.carried(
            messages,
            lambda key: interactions[key].messages,
            lambda key: interactions[key].agent_id,
            agent,
            relayed=relayed,
        )

    def worked_for(
        self, parent: InteractionWithTokenLogpReward
    ) -> list[InteractionWithTokenLogpReward]:
        """`parent`'s agent goes on from it (rule 4): the calls of other agents below it by
        `carry` were its sub-agents' work, linked `subagent` from now on; the ones relinked."""
        relinked = self._carried_by_others.pop(parent.interaction_id, [])
        for node in relinked:
            node.link = Link.SUBAGENT
        return relinked

    def completed_after(self, later: str, earlier: str) -> bool:
        return self._completed.get(later, -1) > self._completed.get(earlier, -1)


def _open_call_link(
    opened: InteractionWithTokenLogpReward,
    messages: Sequence[Mapping[str, Any]],
    agent: str | None,
) -> Link | None:
    """How another agent's call relates to the open tool call `opened` (rule 3): `handoff`
    after a hand-off tool, `subagent` when it holds what the tool was given or its client names
    it a helper of the open call's agent (`X-Rltap-Agent: <agent>/<helper>`), else None."""
    calls = [c for c in _tool_calls(opened) if not _OUTPUT_TOOL.fullmatch(_tool_name(c))]
    if any(_HANDOFF_TOOL.fullmatch(_tool_name(call)) for call in calls):
        return Link.HANDOFF
    if agent is not None and opened.agent_id and agent.startswith(f"{opened.agent_id}/"):
        return Link.SUBAGENT
    held = set(words(conversation_text(messages)))
    if any(held.issuperset(_given_words(call)) for call in calls):
        return Link.SUBAGENT
    return None


def _relayed(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The messages in which another agent speaks: `user` messages with a `name`."""
    return [m for m in messages if m.get("role") == "user" and m.get("name")]


def choose_link(
    links: LinkIndex,
    interactions: Mapping[str, InteractionWithTokenLogpReward],
    interaction: InteractionWithTokenLogpReward,
    prefix_parent: InteractionWithTokenLogpReward | None,  # of the same agent
    context: bytes | None,
    agent: str | None,
    rewrites: bool,
) -> tuple[
    InteractionWithTokenLogpReward | None, Link, str | None, list[InteractionWithTokenLogpReward]
]:
    """Parent, link kind and (unless the client names it) the agent: `rltap.tree.links`' rules; and
    the earlier calls this call shows to be sub-agent work, now linked `subagent` (rule 4)."""
    messages = interaction.messages
    if prefix_parent is not None:
        known = len(prefix_parent.messages) + len(prefix_parent.output_message_list or ())
        relayed = _relayed(messages[known:])
        if relayed:
            carried = links.carried(interactions, relayed, None, relayed=True)
            if carried is not None and links.completed_after(carried, prefix_parent.interaction_id):
                return interactions[carried], Link.CARRY, prefix_parent.agent_id, []
        return prefix_parent, Link.PREFIX, prefix_parent.agent_id, []
    replied = links.latest_reply(messages)
    if replied is not None:
        parent = interactions[replied]
        if agent is not None:
            same_agent = agent == parent.agent_id
        else:
            same_agent = same_agent_prompt(messages, parent)
        if same_agent or rewrites:
            return parent, Link.REWRITE, parent.agent_id, []
        return parent, Link.HANDOFF, derive_agent_id(messages, context), []
    derived = derive_agent_id(messages, context)
    opened = links.open_call()
    if opened is not None and interactions[opened].agent_id != (agent or derived):
        kind = _open_call_link(interactions[opened], messages, agent)
        if kind is not None:
            return interactions[opened], kind, derived, []
    carried = links.carried(interactions, messages, agent or derived)
    if carried is not None:
        parent = interactions[carried]
        own = parent.agent_id == (agent or derived)
        return parent, Link.CARRY, derived, links.worked_for(parent) if own else []
    return None, Link.ROOT, derived, []


def same_agent_prompt(
    messages: Sequence[Mapping[str, Any]], parent: InteractionWithTokenLogpReward
) -> bool:
    """Whether `messages` have the system prompt of the agent whose conversation `parent` is.

    A rewrite stays its agent's conversation, so the prompts up its chain of rewrites are that
    agent's too: a compaction sent without the agent's instructions still hands the compacted
    conversation back to the agent that made it.
    """
    node: InteractionWithTokenLogpReward | None = parent
    while node is not None:
        if same_system_prompt(messages, node.messages):
            return True
        node = node.parent if node.link is Link.REWRITE else None
    return False
