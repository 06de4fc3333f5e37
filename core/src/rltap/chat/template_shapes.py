"""A chat template's output remembered per conversation shape, the texts filled in on each call.

Rendering the Jinja chat template is the largest part of the proxy's own cost on a call. Most calls
render a conversation of a shape seen before: the same roles, keys, tool-call structure, tools and
template arguments, with different texts. When a template only prints a text and never looks
inside it, its output for one shape is fixed text with the conversation's texts spliced in. So a
shape is rendered once with *probes* in place of its texts, the positions where the probes come
out are remembered, and later conversations of that shape are filled in without Jinja.

Whether the template only prints a text is observed on that first rendering, not assumed:

- A probe is a `str` subclass. Printing it (`{{ text }}`, `~`, `+`, and the truthiness of a
  non-empty text) keeps the taint; anything else (a method such as `strip` or `split`, `==`,
  `in`, `len`, slicing, hashing, iteration, `%`) marks the shape as one that is always rendered.
- Strings built from probes stay probes: `+`, and in the probe rendering Jinja's joins (`~`,
  macro output, `{% set %}` blocks) keep the taint, so `(text ~ '\n') | trim` is seen too.
- In the probe rendering every filter, test, call and `%` that is handed a probe marks the shape
  (`wordcount`, `int`, `'abc'.startswith(text)`, `'%8s' % (text,)` read a string's characters
  without calling its methods), except `string` and `default` and the type tests (`is string`,
  `is defined`...), whose answer is the same for every non-empty text.
- A probe's value is a sentinel holding digits, a quote, a backslash, `<`, `>`, `&`, NUL and
  whitespace at both ends, which every escaping or trimming changes. A sentinel that comes out
  altered also marks the shape as always rendered.

Not seen: a text used as the needle of Python's `in` on another string (`text in 'abc'`); no chat
template we know of does that.

Which strings are texts: every string in the messages except the values of `role`, `type` and
`name` (templates compare those), and except empty strings. Those, the other values and every key
make up the shape, with a key that the caller gives for the other template variables (tools,
template arguments).

Usage:
    shapes = ShapeCache(template, source)     # a compiled jinja2 Template and its source
    text = shapes.render(messages, lambda: {"add_generation_prompt": True}, context_key=(True,))
"""

from __future__ import annotations

import functools
import operator
import re
import secrets
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from types import GeneratorType
from typing import Any

from jinja2.runtime import Macro

__all__ = ["ShapeCache"]

# Strings under these keys are compared by templates (roles, part types, function names).
_STRUCTURAL_KEYS = frozenset({"role", "type", "name"})
_DICT = object()
_LIST = object()
_TEXT = object()
# What a probe may be asked for without the shape becoming uncacheable.
_PRINTING = frozenset({"__str__", "__bool__", "__class__", "__add__", "__radd__", "__format__"})
_UNCACHEABLE = object()
_BINOPS: dict[str, Callable[[Any, Any], Any]] = {"%": operator.mod}
# Filters that hand a text on untouched, and tests whose answer is the same for any non-empty text.
_PASSING_FILTERS = frozenset({"string", "default", "d"})
_TYPE_TESTS = frozenset(
    {
        "string", "defined", "undefined", "none", "mapping", "iterable", "sequence", "number",
        "integer", "float", "boolean", "true", "false", "callable",
    }
)  # fmt: skip
# A probe's value (nonce, index): escaping, trimming or tag stripping would all change it.
_SENTINEL_HEAD = " \n\x00"
_SENTINEL_TAIL = "<&'\"\\>\x00\n "


def _fixed_chars(parts: Any) -> int:
    """The size of the strings and bytes among `parts` (a shape's slots, or its context key)."""
    if parts is _UNCACHEABLE:
        return 0
    if isinstance(parts, (str, bytes)):
        return len(parts)
    if isinstance(parts, (list, tuple)):
        return sum(_fixed_chars(part) for part in parts)
    return 0


class _Unshapeable(Exception):
    """A value whose shape can't be keyed (not plain JSON data)."""


def _shape(value: Any, texts: list[str], key: str | None) -> Any:
    """A hashable shape of `value`; its texts are appended to `texts` in walk order."""
    kind = type(value)
    if kind is dict:
        shape: list[Any] = [_DICT]
        for k, v in value.items():
            if type(v) is str:  # most values: handled here, without a call
                if v and k not in _STRUCTURAL_KEYS:
                    texts.append(v)
                    v = _TEXT
                shape += (k, v)
            else:
                shape += (k, _shape(v, texts, k))
        return tuple(shape)
    if kind is str:
        if not value or key in _STRUCTURAL_KEYS:
            return value
        texts.append(value)
        return _TEXT
    if kind is list or kind is tuple:
        return (_LIST, *[_shape(v, texts, None) for v in value])
    if value is None or kind is bool or kind is int or kind is float:
        return (kind, value)
    raise _Unshapeable


def _probed(value: Any, probes: Iterator[str], key: str | None) -> Any:
    """`value` with its texts replaced, in `_shape`'s walk order, by the next of `probes`."""
    kind = type(value)
    if kind is str:
        if not value or key in _STRUCTURAL_KEYS:
            return value
        return next(probes)
    if kind is dict:
        return {k: _probed(v, probes, k) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_probed(v, probes, None) for v in value]
    return value


class _Probing:
    """One probe rendering: its probe class, and whether the template looked inside a probe."""

    def __init__(self, count: int) -> None:
        self.nonce = str(secrets.randbits(60))  # digits: no case change alters them
        self.touched = False
        probing = self

        class Probe(str):
            """A text the template may print but not inspect."""

            __slots__ = ()

            def __getattribute__(self, name: str) -> Any:
                if name not in _PRINTING:
                    probing.touched = True
                return str.__getattribute__(self, name)

            def __str__(self) -> str:
                return self

            def __bool__(self) -> bool:
                return True  # only non-empty texts are probed

            def __format__(self, spec: str) -> str:
                if spec:
                    probing.touched = True
                return self

            def __add__(self, other: object) -> Any:
                if not isinstance(other, str):
                    return NotImplemented
                return Probe(str.__add__(self, other))

            def __radd__(self, other: object) -> Any:
                if not isinstance(other, str):
                    return NotImplemented
                return Probe(str.__add__(other, self))

        def inspected(name: str) -> Callable[..., Any]:
            method = getattr(str, name)

            def spy(self: str, *args: Any) -> Any:
                probing.touched = True
                return method(self, *args)

            return spy

        for name in (
            "__len__", "__iter__", "__getitem__", "__contains__", "__eq__", "__ne__", "__lt__",
            "__le__", "__gt__", "__ge__", "__hash__", "__mul__", "__rmul__", "__mod__",
            "__rmod__", "__getnewargs__", "__sizeof__", "__reduce_ex__",
        ):  # fmt: skip
            setattr(Probe, name, inspected(name))
        self.probe_class = Probe
        self.sentinels = [f"{_SENTINEL_HEAD}{self.nonce}:{i}{_SENTINEL_TAIL}" for i in range(count)]
        self.probes = [Probe(s) for s in self.sentinels]

    def concat(self, parts: Iterable[Any]) -> str:
        """Jinja's join, keeping the taint of any probe among `parts`."""
        parts = list(parts)
        joined = "".join(parts)
        if any(type(part) is self.probe_class for part in parts):
            return self.probe_class(joined)
        return joined

    def holds_probe(self, args: Iterable[Any]) -> bool:
        """Whether a probe is among `args` or directly inside a list, tuple or dict of them."""
        probe = self.probe_class
        for arg in args:
            if type(arg) is probe:
                return True
            kind = type(arg)
            if kind is list or kind is tuple:
                if any(type(item) is probe for item in arg):
                    return True
            elif kind is dict and any(type(item) is probe for item in arg.values()):
                return True
        return False

    def slots(self, output: str) -> list[str | int] | None:
        """The output as fixed text and text indices; None if a sentinel came out altered."""
        head = re.escape(f"{_SENTINEL_HEAD}{self.nonce}:")
        pattern = re.compile(head + r"(\d+)" + re.escape(_SENTINEL_TAIL))
        pieces = pattern.split(output)
        if any(self.nonce in piece for piece in pieces[::2]):
            return None
        return [piece if at % 2 == 0 else int(piece) for at, piece in enumerate(pieces) if piece]


class ShapeCache:
    """`template.render(messages=..., **context)`, remembered per shape; see the module doc.

    `source` is the template's source: the probe renderings use their own compilation of it, whose
    joins keep the probes' taint. At most `max_shapes` shapes are kept (oldest out first),
    uncacheable ones included, so a template that looks inside its texts is probed once per
    shape, not once per call.
    """

    def __init__(
        self,
        template: Any,
        source: str,
        *,
        max_shapes: int = 2048,
        max_chars: int = 16 * 1024 * 1024,
    ) -> None:
        self._template = template
        self._source = source
        self._probe_template: Any = None
        self._probing: _Probing | None = None
        self._shapes: dict[Any, Any] = {}
        self._max_shapes = max_shapes
        self._max_chars = max_chars
        self._chars = 0  # the fixed text held by every remembered shape

    def render(
        self,
        messages: list[dict[str, Any]],
        context: Callable[[], Mapping[str, Any]],
        context_key: Hashable,
    ) -> str:
        """The template's output for `messages`.

        `context()` gives the other template variables, built only when the template renders;
        `context_key` stands for them in the shape (equal keys, equal contexts).
        """
        texts: list[str] = []
        try:
            key = (_shape(messages, texts, None), context_key)
        except _Unshapeable:
            return str(self._template.render(messages=messages, **context()))
        slots = self._shapes.get(key)
        if slots is None:
            slots = self._learn(key, messages, context(), len(texts))
        if slots is _UNCACHEABLE:
            return str(self._template.render(messages=messages, **context()))
        return "".join([slot if type(slot) is str else texts[slot] for slot in slots])

    def learned(self, messages: list[dict[str, Any]], context_key: Hashable) -> bool | None:
        """Whether the shape of this conversation is filled in (True), always rendered (False),
        or not seen yet (None)."""
        try:
            key = (_shape(messages, [], None), context_key)
        except _Unshapeable:
            return False
        slots = self._shapes.get(key)
        return None if slots is None else slots is not _UNCACHEABLE

    def _learn(
        self, key: Any, messages: list[dict[str, Any]], context: Mapping[str, Any], count: int
    ) -> Any:
        probing = _Probing(count)
        probed = _probed(messages, iter(probing.probes), None)
        slots: Any = _UNCACHEABLE
        try:
            output: str | None = self._probe_render(probing, probed, context)
        except Exception:  # the plain rendering raises it again, for the caller to see
            output = None
        if output is not None and not probing.touched:
            found = probing.slots(str.__str__(output))
            if found is not None:
                slots = found
        self._remember(key, slots)
        return slots

    def _remember(self, key: Any, slots: Any) -> None:
        """Keep a shape, dropping the oldest ones while over either bound."""
        chars = _fixed_chars(slots) + _fixed_chars(key[1:])
        if chars > self._max_chars // 8:  # one huge shape (giant tools) would push out the rest
            slots = _UNCACHEABLE
            chars = 0
        while self._shapes and (
            len(self._shapes) >= self._max_shapes or self._chars + chars > self._max_chars
        ):
            oldest = next(iter(self._shapes))
            self._chars -= _fixed_chars(self._shapes.pop(oldest)) + _fixed_chars(oldest[1:])
        self._shapes[key] = slots
        self._chars += chars

    def _probe_render(
        self, probing: _Probing, messages: list[Any], context: Mapping[str, Any]
    ) -> str:
        if self._probe_template is None:
            self._probe_template = self._compile_probe_template()
        self._probing = probing
        try:
            return str(self._probe_template.render(messages=messages, **context))
        finally:
            self._probing = None

    def _compile_probe_template(self) -> Any:
        """The template compiled again in an overlay environment that watches the probes."""
        env = self._template.environment.overlay()
        env.concat = self._concat
        env.filters = {name: self._filter(name, f) for name, f in env.filters.items()}
        env.tests = {name: self._test(name, t) for name, t in env.tests.items()}
        env.call = self._call(env.call)
        if getattr(env, "sandboxed", False):
            env.intercepted_binops = frozenset({"%"})
            env.call_binop = self._call_binop
        template = env.from_string(self._source)
        template.root_render_func.__globals__["str_join"] = self._str_join
        return template

    def _saw(self, args: Iterable[Any]) -> None:
        probing = self._probing
        if probing is not None and probing.holds_probe(args):
            probing.touched = True

    def _filter(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        if name in _PASSING_FILTERS:
            return function

        @functools.wraps(function)  # keeps jinja's pass_context marks
        def watched(*args: Any, **kwargs: Any) -> Any:
            args = tuple(list(a) if isinstance(a, GeneratorType) else a for a in args)
            self._saw((*args, *kwargs.values()))
            return function(*args, **kwargs)

        return watched

    def _test(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def watched(*args: Any, **kwargs: Any) -> Any:
            probing = self._probing
            if probing is not None and name in _TYPE_TESTS:
                args = tuple("x" if type(a) is probing.probe_class else a for a in args)
            self._saw((*args, *kwargs.values()))
            return function(*args, **kwargs)

        return watched

    def _call(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def watched(context: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(obj, Macro):  # a macro's body is watched like the rest
                self._saw((*args, *kwargs.values()))
            return call(context, obj, *args, **kwargs)

        return watched

    def _call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self._saw((left, right))
        return _BINOPS[operator](left, right)

    def _concat(self, parts: Iterable[Any]) -> str:
        probing = self._probing
        return probing.concat(parts) if probing is not None else "".join(parts)

    def _str_join(self, parts: Iterable[Any]) -> str:
        return self._concat([str(part) for part in parts])
