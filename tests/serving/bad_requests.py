"""The bad requests the refusal tests send (:mod:`test_refusals`): each with its path, body,
status, and the field and code its error must name."""

from __future__ import annotations

import json
import math

MODEL = "target"
LIMIT = 64  # the server's --max-tokens
USER = [{"role": "user", "content": "hi"}]
CHAT = {"model": MODEL, "messages": USER}
TEXT = {"model": MODEL, "prompt": "abc"}
LONG = "ab" * 250  # 500 letters: past the tiny model's 512 positions with 60 new tokens
TOO_LONG = "context_length_exceeded"
NOT_YET, UNKNOWN = "unsupported_field", "unknown_field"
TOOL = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
NAN = json.dumps({**CHAT, "temperature": math.nan}).encode()
HUGE = b'{"model": "' + b"x" * (2 << 20) + b'"}'
DEEP = b'{"model": "target", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
BIG_INT = b'{"model": "target", "prompt": "ab", "seed": ' + b"9" * 5000 + b"}"
LONE_SURROGATE = b'{"model": "target", "prompt": "ab\\ud800"}'
TOO_DEEP, STRICT = "too_deeply_nested", None


#: name: (path, body, status, the error's param, its code)
CASES = {
    "malformed JSON": ("chat", b'{"model": ', 400, None, None),
    "JSON nested 100,000 deep": ("chat", DEEP, 400, None, TOO_DEEP),
    "an integer of 5000 digits": ("text", BIG_INT, 400, None, None),
    "a lone surrogate": ("text", LONE_SURROGATE, 400, None, None),
    "not an object": ("chat", b"[1, 2]", 400, None, None),
    "invalid UTF-8": ("chat", b'{"model": "target", "messages": "\xff\xfe"}', 400, None, None),
    "a body too large": ("chat", HUGE, 413, None, "body_too_large"),
    "unknown model": ("chat", {**CHAT, "model": "gpt-9"}, 404, "model", "model_not_found"),
    "no messages": ("chat", {**CHAT, "messages": []}, 400, "messages", None),
    "unknown role": (
        "chat",
        {**CHAT, "messages": [{"role": "wizard"}]},
        400,
        "messages.0.role",
        None,
    ),
    "negative temperature": ("chat", {**CHAT, "temperature": -0.5}, 400, "temperature", None),
    "NaN temperature": ("chat", NAN, 400, "temperature", None),
    "top_p of 0": ("chat", {**CHAT, "top_p": 0}, 400, "top_p", None),
    "top_p above 1": ("chat", {**CHAT, "top_p": 1.5}, 400, "top_p", None),
    "min_p above 1": ("chat", {**CHAT, "min_p": 2}, 400, "min_p", None),
    "top_k of -3": ("chat", {**CHAT, "top_k": -3}, 400, "top_k", None),
    "n of 2": ("chat", {**CHAT, "n": 2}, 400, "n", None),
    "max_tokens of 0": ("chat", {**CHAT, "max_tokens": 0}, 400, "max_tokens", None),
    "max_tokens above the limit": (
        "chat",
        {**CHAT, "max_tokens": LIMIT + 1},
        400,
        "max_tokens",
        None,
    ),
    "beyond the context": (
        "text",
        {**TEXT, "prompt": LONG, "max_tokens": 60},
        400,
        "prompt",
        TOO_LONG,
    ),
    "a chat beyond the context": (
        "chat",
        {**CHAT, "messages": [{"role": "user", "content": LONG}], "max_tokens": 60},
        400,
        "messages",
        TOO_LONG,
    ),
    "an empty text prompt": ("text", {**TEXT, "prompt": ""}, 400, "prompt", None),
    "an empty id prompt": ("text", {**TEXT, "prompt": []}, 400, "prompt", None),
    "an id outside the vocabulary": ("text", {**TEXT, "prompt": [4, 10_000]}, 400, "prompt", None),
    "two prompts": ("text", {**TEXT, "prompt": ["ab", "cd"]}, 400, "prompt", None),
    "an empty stop string": ("text", {**TEXT, "stop": [""]}, 400, "stop", None),
    "too many stop strings": ("text", {**TEXT, "stop": ["s"] * 33}, 400, "stop", None),
    "an unknown rule": ("text", {**TEXT, "rule": "typical"}, 400, "rule", None),
    "a penalty above 2": ("chat", {**CHAT, "presence_penalty": 2.5}, 400, "presence_penalty", None),
    "a bias above 100": ("text", {**TEXT, "logit_bias": {"5": 101}}, 400, "logit_bias", None),
    "a bias on a word": ("text", {**TEXT, "logit_bias": {"a": 1}}, 400, "logit_bias", None),
    "a bias on a superscript": ("text", {**TEXT, "logit_bias": {"²": 1}}, 400, "logit_bias", None),
    "a bias on a 40-digit id": (
        "text",
        {**TEXT, "logit_bias": {"9" * 40: 1}},
        400,
        "logit_bias",
        None,
    ),
    "a bias outside the vocabulary": (
        "text",
        {**TEXT, "logit_bias": {"10000": 1}},
        400,
        "logit_bias",
        None,
    ),
    "tool_choice required without tools": (
        "chat",
        {**CHAT, "tool_choice": "required"},
        400,
        "tool_choice",
        None,
    ),
    "tool_choice naming no given tool": (
        "chat",
        {**CHAT, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "x"}}},
        400,
        "tool_choice",
        None,
    ),
    "a tool without a type": (
        "chat",
        {**CHAT, "tools": [TOOL["function"]]},
        400,
        "tools.0.type",
        None,
    ),
    "tool_calls on a user message": (
        "chat",
        {**CHAT, "messages": [{**USER[0], "tool_calls": [CALL]}]},
        400,
        "messages.0",
        None,
    ),
    "an unknown response format": (
        "chat",
        {**CHAT, "response_format": {"type": "yaml"}},
        400,
        "response_format.type",
        None,
    ),
    "a json_schema format without its schema": (
        "chat",
        {**CHAT, "response_format": {"type": "json_schema"}},
        400,
        "response_format",
        None,
    ),
    "a schema that does not compile": (
        "chat",
        {
            **CHAT,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "nosuch"}},
            },
        },
        400,
        "response_format",
        None,
    ),
    "top_logprobs above 20": (
        "chat",
        {**CHAT, "logprobs": True, "top_logprobs": 21},
        400,
        "top_logprobs",
        None,
    ),
    "top_logprobs without logprobs": (
        "chat",
        {**CHAT, "top_logprobs": 2},
        400,
        "top_logprobs",
        None,
    ),
    "logprobs above 20": ("text", {**TEXT, "logprobs": 21}, 400, "logprobs", None),
    "echo": ("text", {**TEXT, "echo": True}, 400, "echo", NOT_YET),
    "a chat field in a text completion": ("text", {**TEXT, "tools": []}, 400, "tools", UNKNOWN),
    "an unknown field": (
        "chat",
        {**CHAT, "repetition_penalty": 1.1},
        400,
        "repetition_penalty",
        UNKNOWN,
    ),
    # types are strict, as in the OpenAI API: no boolean, string or fraction for a number
    "max_tokens true": ("chat", {**CHAT, "max_tokens": True}, 400, "max_tokens", STRICT),
    "max_tokens as a string": ("chat", {**CHAT, "max_tokens": "16"}, 400, "max_tokens", STRICT),
    "max_tokens with a fraction": ("text", {**TEXT, "max_tokens": 2.5}, 400, "max_tokens", STRICT),
    "max_completion_tokens true": (
        "chat",
        {**CHAT, "max_completion_tokens": True},
        400,
        "max_completion_tokens",
        STRICT,
    ),
    "temperature as a string": ("chat", {**CHAT, "temperature": "1"}, 400, "temperature", STRICT),
    "temperature true": ("text", {**TEXT, "temperature": True}, 400, "temperature", STRICT),
    "temperature 1e308": ("chat", {**CHAT, "temperature": 1e308}, 400, "temperature", None),
    "temperature above 2": ("chat", {**CHAT, "temperature": 2.5}, 400, "temperature", None),
    "top_p true": ("chat", {**CHAT, "top_p": True}, 400, "top_p", STRICT),
    "a penalty below -2": (
        "text",
        {**TEXT, "frequency_penalty": -3},
        400,
        "frequency_penalty",
        None,
    ),
    "n true": ("chat", {**CHAT, "n": True}, 400, "n", STRICT),
    "n of 0": ("chat", {**CHAT, "n": 0}, 400, "n", None),
    "a seed with a fraction": ("text", {**TEXT, "seed": 1.5}, 400, "seed", STRICT),
    "stream 1": ("chat", {**CHAT, "stream": 1}, 400, "stream", STRICT),
    "ignore_eos as a string": ("text", {**TEXT, "ignore_eos": "yes"}, 400, "ignore_eos", STRICT),
    "ignore_eos beside a response format": (
        "chat",
        {**CHAT, "ignore_eos": True, "response_format": {"type": "json_object"}},
        400,
        "ignore_eos",
        None,
    ),
    "logprobs as a string": ("chat", {**CHAT, "logprobs": "true"}, 400, "logprobs", STRICT),
    "logprobs true in a text completion": (
        "text",
        {**TEXT, "logprobs": True},
        400,
        "logprobs",
        None,
    ),
    "a bias of true": ("text", {**TEXT, "logit_bias": {"5": True}}, 400, "logit_bias.5", None),
    "a stop number": ("text", {**TEXT, "stop": [5]}, 400, "stop.0", None),
    "a model number": ("chat", {**CHAT, "model": 5}, 400, "model", None),
    "a prompt of booleans": ("text", {**TEXT, "prompt": [True]}, 400, "prompt.0", None),
    "a user message without content": (
        "chat",
        {**CHAT, "messages": [{"role": "user"}]},
        400,
        "messages.0.content",
        None,
    ),
    "a system message with null content": (
        "chat",
        {**CHAT, "messages": [{"role": "system", "content": None}, *USER]},
        400,
        "messages.0.content",
        None,
    ),
    "an assistant message with neither content nor calls": (
        "chat",
        {**CHAT, "messages": [*USER, {"role": "assistant"}, *USER]},
        400,
        "messages.1",
        None,
    ),
    "a tool message without its call's id": (
        "chat",
        {**CHAT, "messages": [*USER, {"role": "tool", "content": "42"}]},
        400,
        "messages.1.tool_call_id",
        None,
    ),
    "a text part's text as a number": (
        "chat",
        {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        400,
        "messages.0.content.0.text",
        None,
    ),
    "a tool's strict as 1": (
        "chat",
        {**CHAT, "tools": [{**TOOL, "function": {**TOOL["function"], "strict": 1}}]},
        400,
        "tools.0.function.strict",
        None,
    ),
    "a message's name": (
        "chat",
        {**CHAT, "messages": [{**USER[0], "name": "x"}]},
        400,
        "messages.0.name",
        UNKNOWN,
    ),
}
