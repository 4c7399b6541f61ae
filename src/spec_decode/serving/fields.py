"""The policy for every field a client may send beyond those the request schemas implement
(:mod:`~spec_decode.serving.schemas`): accepted because it cannot change the answer, accepted at
the value that means "off" while it is not implemented, or refused. Nothing a client sends is
dropped without a word."""

from __future__ import annotations

from typing import Any

#: Fields accepted and not used. (``stream_options.include_usage``: the last event of a stream
#: always carries the usage. ``parallel_tool_calls``: the calls come back as the model wrote them,
#: so ``false`` does not cut a second call; the packaged model writes one call an answer.)
NO_EFFECT = frozenset(
    {"user", "metadata", "store", "service_tier", "stream_options", "parallel_tool_calls"}
)
#: Fields of the OpenAI API not implemented yet, with the values that leave the answer as it is:
#: any other value is refused with a 400 naming the field.
_NOT_YET = {
    "frequency_penalty": (None, 0),
    "presence_penalty": (None, 0),
    "logit_bias": (None, {}),
}
CHAT_NOT_YET = _NOT_YET | {
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "response_format": (None, {"type": "text"}),
    "reasoning_effort": (None,),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "web_search_options": (None,),
}
COMPLETION_NOT_YET = _NOT_YET | {
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
}


def is_off(value: Any, off: Any) -> bool:
    """Whether a JSON value is ``off``: None and booleans by identity (``0`` is not ``false``),
    numbers by value (``0.0`` is ``0``), the rest by equality."""
    if off is None or isinstance(off, bool) or isinstance(value, bool):
        return value is off
    return bool(value == off)
