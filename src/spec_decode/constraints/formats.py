"""The grammars of the OpenAI API's constrained outputs: ``response_format`` (any JSON object,
or a document of a JSON schema) and tool calls (under ``tool_choice`` "required" or a named
function: only calls; under "auto" with a response format: calls or the formatted answer).

A call is written in the form the packaged Qwen2.5 chat template asks for, which
:mod:`spec_decode.serving.tool_calls` reads back: a ``<tool_call>`` block holding
``{"name": ..., "arguments": {...}}``, the arguments matching the function's parameters. Pure
functions from request values to a :class:`~spec_decode.constraints.grammar.Grammar` (a Lark
grammar with llguidance's ``%json`` rules); a value that cannot give one is a
:class:`~spec_decode.core.errors.BadRequest` naming its field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from spec_decode.constraints.grammar import Grammar
from spec_decode.core.errors import BadRequest

#: How a call is written (the packaged Qwen2.5 template's form).
CALL_OPEN, CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"
#: llguidance's JSON options: whitespace where JSON allows it, at most 40 characters of it
#: between two tokens of JSON, so a model may indent but cannot pad an answer until its token
#: limit (a schema's own "x-guidance" options come first).
JSON_OPTIONS = {"whitespace_flexible": True, "whitespace_pattern": r"[\x20\x0A\x0D\x09]{1,40}"}


def answer_schema(response_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a ``response_format`` asks the answer to match: None for ``text`` (or
    none given), any object for ``json_object``, the given schema for ``json_schema``."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")  # type: ignore[union-attr]
        schema = spec.get("schema", {}) if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise BadRequest(
                "response_format.json_schema must be an object with a schema object",
                "response_format",
            )
        return dict(schema)
    raise BadRequest(
        f"response_format type {kind!r} is not text, json_object or json_schema",
        "response_format",
    )


def call_schema(functions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON of one call of one of ``functions`` (OpenAI function definitions)."""
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": function["name"]},
                "arguments": function.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for function in functions
    ]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def output_grammar(
    *,
    answer: Mapping[str, Any] | None = None,
    functions: Sequence[Mapping[str, Any]] = (),
    calls_only: bool = False,
    parallel: bool = True,
) -> Grammar | None:
    """The grammar of an output that is a JSON document of ``answer`` (a schema), one of
    ``functions``' calls (several in a row when ``parallel``), or either; None when nothing
    constrains it (free text, with or without calls). ``calls_only`` leaves only the calls."""
    if calls_only and not functions:
        raise BadRequest("tool_choice needs tools to choose from", "tool_choice")
    alternatives, rules = [], []
    if functions and (calls_only or answer is not None):
        more = ' ("\\n" call)*' if parallel else ""
        alternatives.append("calls")
        rules += [
            f"calls: call{more}",
            f"call: {json.dumps(CALL_OPEN)} %json {_with_options(call_schema(functions))} "
            f"{json.dumps(CALL_CLOSE)}",
        ]
    if answer is not None and not calls_only:
        alternatives.append("answer")
        rules.append(f"answer: %json {_with_options(answer)}")
    if not alternatives:
        return None
    lark = "\n".join([f"start: {' | '.join(alternatives)}", *rules]) + "\n"
    return Grammar(_compiled(lark), "tool_choice" if calls_only else "response_format")


def _with_options(schema: Mapping[str, Any]) -> str:
    """A schema's JSON text with :data:`JSON_OPTIONS` among its options."""
    options = schema.get("x-guidance")
    return json.dumps({**schema, "x-guidance": {**JSON_OPTIONS, **(options or {})}})


def _compiled(lark: str) -> str:
    import llguidance

    return llguidance.LLMatcher.grammar_from_lark(lark)
