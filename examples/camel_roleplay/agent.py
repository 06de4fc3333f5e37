"""A CAMEL role play on the rltap proxy, rewarded on the tutor's final answer.

A Student (CAMEL's user agent) and a Math Tutor (the assistant agent, with a calculator tool) work
on a word problem. CAMEL's task-specify agent first turns the problem into a concrete task; all
three agents call the policy through the proxy, so every call is recorded at the token level. The
reward is 1.0 when the last number of the tutor's final answer is the row's answer, else 0.0.
`ShapedAgent`, the one `rltap train` trains (train.toml), asks the tutor the row's task itself
(no task specifier, the student's instruction scripted) and rewards it by `shaped_reward`.

    rltap rollout examples/camel_roleplay/agent.py:Agent --data examples/camel_roleplay/data.jsonl \
        --engine scripted --script rltap.testing.scripts:tool_loop --model <model dir> \
        --out runs/camel_roleplay
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from typing import Any

from camel.messages import BaseMessage
from camel.societies import RolePlaying
from camel.toolkits import FunctionTool

from rltap_camel import CamelAdapter, ProxyModel, name_agents

FINAL = "Final answer:"
# Budgets: each turn pair is 2-3 calls on ever longer prompts (three agents' system prompts); on
# a CPU a small real model must finish an episode in a minute or two, not ten. One turn pair is
# the student's instruction and the tutor's answer, tool call included.
MAX_TURNS = 1
TURN_TOKENS = 96  # the task-specify and student replies
ANSWER_TOKENS = 160  # the tutor's replies
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_OPERATORS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    msg = f"unsupported expression: {ast.dump(node)}"
    raise ValueError(msg)


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression such as "12 * (3 + 4)".

    Args:
        expression (str): Numbers combined with + - * / and parentheses.

    Returns:
        str: The value, or why it could not be computed.
    """
    try:
        value = _evaluate(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"cannot compute {expression!r}: {exc}"
    return f"{value:g}"


def final_answer_reward(answer: str, data: dict[str, Any]) -> float:
    """1.0 when the last number after "Final answer:" (or anywhere) is the expected answer."""
    numbers = _NUMBER.findall(answer.rpartition(FINAL)[2] or answer)
    return 1.0 if numbers and float(numbers[-1]) == float(data["answer"]) else 0.0


FORMAT = re.compile(r"Final answer:\s*-?\d+(?:\.\d+)?")
FORMAT_CREDIT = 0.2
CLOSENESS_CREDIT = 0.3


def closeness(answer: str, data: dict[str, Any]) -> float:
    """How near the tutor's answer (the last number after "Final answer:", or anywhere) is to
    the expected one: 1 - |error| / max(|expected|, 1), down to 0 (and 0 with no number)."""
    numbers = _NUMBER.findall(answer.rpartition(FINAL)[2] or answer)
    if not numbers:
        return 0.0
    expected = float(data["answer"])
    return max(0.0, 1.0 - abs(float(numbers[-1]) - expected) / max(abs(expected), 1.0))


def shaped_reward(answer: str, data: dict[str, Any]) -> float:
    """1.0 for the right answer; otherwise 0.2 when the tutor's reply still gives a 'Final
    answer: <number>', plus 0.3 times how near its answer is (`closeness`), at most 0.5: a
    small model's tutor seldom ends on the right number, and a group of zeros carries no
    signal. The credits stay below a right answer."""
    if final_answer_reward(answer, data):
        return 1.0
    marked = FORMAT.search(answer) is not None
    return FORMAT_CREDIT * marked + CLOSENESS_CREDIT * closeness(answer, data)


class Agent(CamelAdapter):
    """The role play as an rltap agent: `run(data)` plays one row and returns its reward."""

    reward = staticmethod(final_answer_reward)
    specify_task = True  # CAMEL's task-specify agent first rewrites the row's task
    answer_tokens = ANSWER_TOKENS

    def __init__(self) -> None:
        super().__init__(reward_fn=type(self).reward)

    def society(self, data: dict[str, Any], model: ProxyModel) -> RolePlaying:
        """The row's role play, every agent on the policy behind the proxy (with_config shares
        the clients). name_agents makes each role send its name (X-Rltap-Agent), so the export's
        agent ids are "Math Tutor" and "Student" and `rltap rollout --agents "Math Tutor"` trains
        the tutor alone; the task-specify agent calls before that, with a backend named here."""
        short = model.with_config(max_tokens=TURN_TOKENS)
        return name_agents(
            RolePlaying(
                assistant_role_name="Math Tutor",
                user_role_name="Student",
                task_prompt=data["task"],
                with_task_specify=self.specify_task,
                assistant_agent_kwargs={
                    "model": model.with_config(max_tokens=self.answer_tokens),
                    "tools": [FunctionTool(calculate)],
                },
                user_agent_kwargs={"model": short},
                task_specify_agent_kwargs={
                    "model": short.for_agent("Task Specifier"),
                    "word_limit": 40,
                },
            )
        )

    def episode(self, data: dict[str, Any], model: ProxyModel) -> str:
        # A plain def: RolePlaying(...) runs the task-specify agent synchronously, so the adapter
        # runs this in a thread of its own, off the event loop the in-process proxy serves on.
        society = self.society(data, model)
        message = society.init_chat()
        answer = ""
        for _ in range(MAX_TURNS):
            assistant, user = society.step(message)
            if not assistant.msgs:  # a role agent ended the play
                break
            message = assistant.msg
            answer = message.content
            if FINAL in answer or assistant.terminated or user.terminated:
                break
        return answer


class ShapedAgent(Agent):
    """The role play rewarded by `shaped_reward`: what `rltap train --agents "Math Tutor"`
    trains (docs/learning.md). The tutor is asked the row's task as it is, in its role-play
    system prompt and as the student's instruction: a 135M task specifier rewrote "Tom has 15
    marbles and gives 10 away ..." into "create a math problem that requires creative thinking",
    and a 135M student never asked it; no tutor can answer a sum it was never shown."""

    reward = staticmethod(shaped_reward)
    specify_task = False
    # "Final answer: 5", or a calculate call, is a few tokens; a 135M tutor's replies run on
    # to the cap, so the cap is most of an episode's time (bench/learn_frameworks.py).
    answer_tokens = 64

    def episode(self, data: dict[str, Any], model: ProxyModel) -> str:
        # The student's first instruction is the row's question: greedy, a 135M student answers
        # "give me instructions" with "I'm ready to assist you" on a loop, and the tutor echoes it.
        society = self.society(data, model)
        society.init_chat()
        question = f"Instruction: {data['task']}\nInput: None"
        reply = society.assistant_agent.step(BaseMessage.make_user_message("Student", question))
        return reply.msg.content if reply.msgs else ""
