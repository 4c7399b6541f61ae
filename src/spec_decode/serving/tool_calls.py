"""Tool calls in the model's text, in the form the packaged Qwen2.5 chat template asks for:
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call; and, since
small models given tools often skip the tags, an answer that is nothing but one such JSON object
naming a given tool, bare or in a ```json fence (what the packaged 1.5B model writes).

:func:`split_tool_calls` turns a finished answer into its content and the OpenAI ``tool_calls``
list; :class:`ToolCallText` does the same while the answer streams, releasing content as soon as
it cannot be the start of a call and holding back everything from the first call on (the client
gets the calls, whole, when the generation ends). A block whose JSON does not parse, or has no
string ``name`` and object ``arguments``, is not a call: it stays in the content, as the model
wrote it.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from spec_decode.serving.text import held_back

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
_FENCED = re.compile(r"```(?:json)?[ \t]*\n(.*?)\n?```", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call: the function's name and its arguments as a JSON object's text."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def as_openai(self, index: int | None = None) -> dict[str, Any]:
        """The call as the OpenAI API writes it (with ``index`` in a stream's delta)."""
        call: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return call if index is None else {"index": index, **call}


def parse_call(block: str) -> ToolCall | None:
    """The call a block's text holds, or None when it holds none."""
    try:
        value = json.loads(block)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    name, arguments = value.get("name"), value.get("arguments", {})
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return None
    return ToolCall(name, json.dumps(arguments, ensure_ascii=False))


def whole_answer_call(text: str, names: Collection[str]) -> ToolCall | None:
    """The call an answer makes that is nothing but one JSON object ``{"name": N, "arguments":
    {...}}`` with N one of the tools' ``names``, bare or in a ```json (or plain ```) fence; None
    for any other answer."""
    body = text.strip()
    fenced = _FENCED.fullmatch(body)
    call = parse_call(fenced.group(1) if fenced else body)
    return call if call is not None and call.name in names else None


def split_tool_calls(text: str, names: Collection[str] = ()) -> tuple[str, list[ToolCall]]:
    """``text`` without its call blocks (stripped), and the calls in order; without blocks, an
    answer that is one call to a tool in ``names`` (:func:`whole_answer_call`) is that call."""
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        call = parse_call(match.group(1))
        if call is None:
            return match.group(0)
        calls.append(call)
        return ""

    content = _BLOCK.sub(take, text)
    if not calls and (whole := whole_answer_call(text, names)) is not None:
        return "", [whole]
    return (content.strip() if calls else content), calls


class ToolCallText:
    """Streamed text with the tool calls to ``names`` taken out: :meth:`add` returns the content
    that became final, :meth:`finish` the rest of the content and the calls. While the answer
    may still be one whole-answer call (it begins with ``{`` or a json fence), nothing is
    released."""

    def __init__(self, names: Collection[str]) -> None:
        self.names = frozenset(names)
        self._text = ""
        self._released = 0
        self._calling = False  # a call began: hold everything back until the end
        self._whole = True  # the answer so far may be one whole-answer call

    def add(self, piece: str) -> str:
        self._text += piece
        if self._calling:
            return ""
        if self._whole:
            self._whole = _may_open_a_call(self._text)
            if self._whole:
                return ""
        start = self._text.find(OPEN, self._released)
        if start >= 0:
            self._calling = True
            return self._release(start)
        return self._release(len(self._text) - held_back(self._text, (OPEN,)))

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The content not yet released and every call (all of it as content when no block
        parses as a call)."""
        content, calls = split_tool_calls(self._text[self._released :], self.names)
        self._released = len(self._text)
        return content, calls

    def _release(self, end: int) -> str:
        piece, self._released = self._text[self._released : end], max(end, self._released)
        return piece


def _may_open_a_call(text: str) -> bool:
    """Whether an answer that begins with ``text`` may still be a whole-answer call: empty so
    far, a ``{``, or a code fence whose language is json or none (or not yet written)."""
    start = text.lstrip()
    if not start or start.startswith("{"):
        return True
    if not start.startswith("```"):
        return "```".startswith(start)
    line, newline, _ = start[3:].partition("\n")
    return not newline or line.strip() in ("", "json")


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a chat template reads them: an assistant's ``tool_calls`` with their
    ``arguments`` as objects (the OpenAI API sends them as JSON text; templates write them with
    ``tojson``)."""
    rendered = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_with_object_arguments(c) for c in calls]}
        rendered.append(message)
    return rendered


def _with_object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function", {}))
    arguments = function.get("arguments", "{}")
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):  # else written as given
            function["arguments"] = json.loads(arguments)
    return {**call, "function": function}
