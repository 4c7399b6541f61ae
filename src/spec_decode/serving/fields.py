"""The policy for every field a client may send beyond those the request schemas implement
(:mod:`~spec_decode.serving.schemas`): accepted because it cannot change the answer, accepted at
the value that means "off" while it is not implemented, or refused. Nothing a client sends is
dropped without a word."""

from __future__ import annotations

from typing import Any

#: The request fields of the OpenAI API (chat and text completions, as its client sends them):
#: each is implemented by the schema, in :data:`NO_EFFECT`, or in a ``*_NOT_YET`` table.
OPENAI_CHAT_FIELDS = frozenset(
    {
        "messages", "model", "audio", "frequency_penalty", "function_call", "functions",
        "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
        "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty",
        "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier", "seed",
        "service_tier", "stop", "store", "stream", "stream_options", "temperature",
        "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
        "web_search_options",
    }
)  # fmt: skip
OPENAI_COMPLETION_FIELDS = frozenset(
    {
        "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
        "max_tokens", "n", "presence_penalty", "seed", "stop", "stream", "stream_options",
        "suffix", "temperature", "top_p", "user",
    }
)  # fmt: skip
#: Fields accepted and not used. (``stream_options.include_usage``: the last event of a stream
#: always carries the usage; the others identify or route a request.)
NO_EFFECT = frozenset(
    {
        "user", "metadata", "store", "service_tier", "stream_options", "prompt_cache_key",
        "safety_identifier",
    }
)  # fmt: skip
#: Fields of the OpenAI API not implemented yet, with the values that leave the answer as it is:
#: any other value is refused with a 400 naming the field.
CHAT_NOT_YET = {
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "reasoning_effort": (None,),
    "verbosity": (None,),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "web_search_options": (None,),
}
COMPLETION_NOT_YET = {
    "echo": (None, False),
    "best_of": (None, 1),
}


def is_off(value: Any, off: Any) -> bool:
    """Whether a JSON value is ``off``: None and booleans by identity (``0`` is not ``false``),
    numbers by value (``0.0`` is ``0``), the rest by equality."""
    if off is None or isinstance(off, bool) or isinstance(value, bool):
        return value is off
    return bool(value == off)
