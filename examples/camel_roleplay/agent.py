"""A CAMEL role play on the rltap proxy, rewarded on the tutor's final answer.

A Student (CAMEL's user agent) and a Math Tutor (the assistant agent, with a calculator tool) work
on a word problem. CAMEL's task-specify agent first turns the problem into a concrete task; all
three agents call the policy through the proxy, so every call is recorded at the token level. The
reward is 1.0 when the last number of the tutor's final answer is the row's answer, else 0.0.
`ShapedAgent`, the one `rltap train` trains (train.toml: the student and the tutor, two
policies), plays the two roles on short prompts, without the task specifier, and rewards the
pair by `shaped_reward` on the tutor's answer.

    rltap rollout examples/camel_roleplay/agent.py:Agent --data examples/camel_roleplay/data.jsonl \
        --engine scripted --script rltap.testing.scripts:tool_loop --model <model dir> \
        --out runs/camel_roleplay
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from camel.societies import RolePlaying
from camel.toolkits import FunctionTool
from camel.types import RoleType

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


# The first sum or difference of two numbers in the student's instruction ("Solve: 7 + 11").
_EXPRESSION = re.compile(r"(-?\d+(?:\.\d+)?)\s*([+-])\s*(\d+(?:\.\d+)?)")
INSTRUCTION_CREDIT = 0.2


@dataclass(frozen=True, slots=True)
class Exchange:
    """The trained role play's two messages: the student's instruction, the tutor's answer."""

    instruction: str
    answer: str


def relays_the_problem(instruction: str, data: dict[str, Any]) -> bool:
    """Whether the student's instruction holds the row's sum or difference: its first `a + b`
    or `a - b` has the row's answer as its value (what the tutor needs to be shown)."""
    match = _EXPRESSION.search(instruction)
    if match is None:
        return False
    left, sign, right = float(match[1]), match[2], float(match[3])
    return (left + right if sign == "+" else left - right) == float(data["answer"])


def role_play_reward(exchange: Exchange, data: dict[str, Any]) -> float:
    """The pair's reward: 1.0 for the tutor's right answer; otherwise `shaped_reward` of its
    answer plus 0.2 when the student's instruction holds the row's sum or difference
    (`relays_the_problem`), at most 0.7. The tutor sees the problem only through the student,
    as the Agents SDK's calculator sees it only through the tool call that the same 0.2
    credits there; every credit stays below a right answer."""
    reward = shaped_reward(exchange.answer, data)
    if reward == 1.0:
        return 1.0
    return reward + INSTRUCTION_CREDIT * relays_the_problem(exchange.instruction, data)


class Agent(CamelAdapter):
    """The role play as an rltap agent: `run(data)` plays one row and returns its reward."""

    reward = staticmethod(final_answer_reward)
    specify_task = True  # CAMEL's task-specify agent first rewrites the row's task
    answer_tokens = ANSWER_TOKENS
    student_tokens = TURN_TOKENS
    tutor_tool = True  # the tutor's calculate tool
    system_prompts: dict[str, Any] | None = None  # None: CAMEL's AI-society role prompts

    def __init__(self) -> None:
        super().__init__(reward_fn=type(self).reward)

    def society(self, data: dict[str, Any], model: ProxyModel) -> RolePlaying:
        """The row's role play, every agent on the policy behind the proxy (with_config shares
        the clients). name_agents makes each role send its name (X-Rltap-Agent), so the export's
        agent ids are "Math Tutor" and "Student" and `rltap rollout --agents "Math Tutor"` trains
        the tutor alone; the task-specify agent calls before that, with a backend named here."""
        short = model.with_config(max_tokens=self.student_tokens)
        return name_agents(
            RolePlaying(
                assistant_role_name="Math Tutor",
                user_role_name="Student",
                task_prompt=data["task"],
                with_task_specify=self.specify_task,
                assistant_agent_kwargs={
                    "model": model.with_config(max_tokens=self.answer_tokens),
                    "tools": [FunctionTool(calculate)] if self.tutor_tool else None,
                },
                user_agent_kwargs={"model": short},
                task_specify_agent_kwargs={
                    "model": short.for_agent("Task Specifier"),
                    "word_limit": 40,
                },
                sys_msg_generator_kwargs=self.system_prompts,
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


# The trained role play's system prompts, in place of CAMEL's AI-society ones (~400 tokens
# each, about a task to accomplish together over many turns): the student alone is shown the
# problem and asks the tutor, who sees only the student's message and answers in one line.
STUDENT_PROMPT = (
    "You are a {user_role}. Your homework problem: {task}\nAsk the {assistant_role} to solve it."
)
TUTOR_PROMPT = (
    "You are a {assistant_role}. Solve the math problem the {user_role} asks. "
    "Reply with one line: Final answer: <number>"
)
OPENING = (
    "I am your Math Tutor. Give me your problem as a sum or a difference of its numbers, "
    "in one line: Solve: <number> + <number>, or Solve: <number> - <number>"
)


class ShapedAgent(Agent):
    """The role play `rltap train` trains (train.toml: a policy for the student and one for the
    tutor), rewarded by `role_play_reward`, the episode's one reward, on the tutor's answer.

    A real two-role episode, on short system prompts (`STUDENT_PROMPT`, `TUTOR_PROMPT`): the
    tutor opens, the Student (CAMEL's user agent), who alone is shown the row's problem, writes
    the tutor its instruction, and the Math Tutor, who sees only that, answers; one
    `RolePlaying.step`. No task specifier (a 135M one rewrote "Tom has 15 marbles and gives 10
    away ..." into "create a math problem that requires creative thinking") and no calculator
    (its schema makes every tutor prompt longer, and a 135M tutor wrote JavaScript-like
    `function calculate()` snippets instead of calling it). docs/learning.md has the figures."""

    reward = staticmethod(role_play_reward)
    specify_task = False
    # "Final answer: 5" is a few tokens; a 135M model's replies run on to the cap, so the caps
    # are most of an episode's time (bench/learn_frameworks.py).
    answer_tokens = 24
    student_tokens = 40
    tutor_tool = False
    system_prompts: dict[str, Any] | None = {  # noqa: RUF012 (read only)
        "sys_prompts": {RoleType.USER: STUDENT_PROMPT, RoleType.ASSISTANT: TUTOR_PROMPT},
        "sys_msg_meta_dict_keys": {"task", "assistant_role", "user_role"},
    }

    def episode(  # type: ignore[override]  # an Exchange, not Agent's answer text
        self, data: dict[str, Any], model: ProxyModel
    ) -> Exchange:
        society = self.society(data, model)
        tutor, student = society.step(society.init_chat(OPENING))  # the student, then the tutor
        return Exchange(
            instruction=student.msg.content if student.msgs else "",
            answer=tutor.msg.content if tutor.msgs else "",
        )
