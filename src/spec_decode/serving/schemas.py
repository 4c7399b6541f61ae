"""The request bodies the server accepts (pydantic models of the OpenAI API's fields), the policy
for every other field a client may send, and the OpenAI-style error every refusal is reported with.

Fields follow the OpenAI API (``temperature``, ``top_p``, ``max_tokens`` or
``max_completion_tokens``, ``stop``, ``seed``, ``n``, ``stream``, the penalties and
``logit_bias``; for chat ``tools``, ``tool_choice``, ``parallel_tool_calls``, ``response_format``
and ``logprobs``), plus ``top_k`` and ``min_p`` as llama-server and vLLM accept them (0 or -1 for
``top_k`` means off) and ``ignore_eos`` as both take it, vLLM's ``return_token_ids`` and this
server's ``rule``. No field a client sends is dropped without a word (:func:`check_fields`, with
the tables of :mod:`~spec_decode.serving.fields`): a field that cannot change the answer is
accepted and not used; one of the API this server does not implement yet is accepted only at the
value that means "off" and refused with a 400 naming it otherwise; any other field is a 400
naming it.

Types are strict, as the OpenAI API checks them: a boolean is not a number (``max_tokens: true``
is a 400), a string is not a number (``"16"``), a number with a fraction is not an integer; a
number field takes an integer (``temperature: 1``). Ranges are the API's: ``temperature`` in
[0, 2], ``top_p`` in (0, 1], the penalties in [-2, 2], ``max_tokens`` at least 1.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from spec_decode.constraints.formats import answer_schema, output_grammar
from spec_decode.constraints.grammar import Grammar
from spec_decode.core.processors import PROCESSOR_RANGES, LogitBias, Penalties
from spec_decode.core.sampling import SAMPLING_RANGES, Range, SamplingParams
from spec_decode.serving.fields import CHAT_NOT_YET, COMPLETION_NOT_YET, NO_EFFECT, is_off
from spec_decode.serving.logprobs import MAX_TOP_LOGPROBS
from spec_decode.serving.messages import Message, NamedChoice, ResponseFormat, Tool
from spec_decode.serving.request import RequestOptions

#: The most stop strings a request may give: more than the OpenAI API's 4, since editors send
#: more (Continue's fill-in-the-middle requests to a Qwen coder model carry a dozen).
MAX_STOP = 32
#: Above every token id (llama.cpp's are 32-bit integers).
MAX_TOKEN_ID = 1 << 31

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
#: The OpenAI API's ranges where they are narrower than the sampler's own
#: (:data:`~spec_decode.core.sampling.SAMPLING_RANGES`, which the CLI takes as they are).
API_RANGES = {**SAMPLING_RANGES, "temperature": Range(0.0, 2.0)}


class APIError(Exception):
    """A refusal with its HTTP status and OpenAI-style error body."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind
        self.param, self.code, self.headers = param, code, headers or {}

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``, as the OpenAI API sends."""
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


class UnsupportedField(ValueError):
    """A field of the OpenAI API at a value this server does not implement yet (its 400 has
    the code ``unsupported_field``)."""


class SamplingFields(BaseModel):
    """What chat and text completions share: the model, sampling controls, limits, stop."""

    model_config = ConfigDict(extra="forbid")  # check_fields has dealt with the others

    model: str
    temperature: FiniteFloat = 1.0
    top_p: FiniteFloat = 1.0
    top_k: int | None = None
    min_p: FiniteFloat = 0.0
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    #: The verification rule (non-standard): coupled (same seed, same tokens as target-only
    #: decoding) or standard; the server's default when omitted.
    rule: Literal["coupled", "standard"] | None = None
    n: int = 1
    stop: str | list[str] | None = None
    stream: bool = False
    return_token_ids: bool = False
    frequency_penalty: FiniteFloat = 0.0
    presence_penalty: FiniteFloat = 0.0
    #: Token id (as a string, JSON keys being strings) -> the bias added to its logit.
    logit_bias: dict[str, FiniteFloat] | None = None
    #: Decode past end-of-generation tokens (non-standard, as llama-server and vLLM take it).
    ignore_eos: bool = False

    @field_validator("temperature", "top_p", "min_p")
    @classmethod
    def _in_range(cls, value: float, info: ValidationInfo) -> float:
        return API_RANGES[info.field_name].check(info.field_name, value)

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _penalty_in_range(cls, value: float, info: ValidationInfo) -> float:
        return PROCESSOR_RANGES[info.field_name].check(info.field_name, value)

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (value or {}).items():
            # ASCII digits only ("²" is a digit to str.isdigit, not to int), and an id a token
            # could have (llama.cpp's are 32-bit): a longer one is no token of any vocabulary
            if not (key.isascii() and key.isdigit()) or int(key) >= MAX_TOKEN_ID:
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
            PROCESSOR_RANGES["logit_bias"].check("logit_bias", bias)
        return value

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value: int | None) -> int | None:
        if value is None or value in (0, -1):  # off, as llama-server and vLLM take them
            return None
        return API_RANGES["top_k"].check("top_k", value)

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError(f"only n = 1 is supported, got {value}")
        return value

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOP or any(not s for s in stops):
            raise ValueError(f"stop takes at most {MAX_STOP} non-empty strings")
        return value

    def options(self) -> RequestOptions:
        """Everything this body asks of its decoding, as the engine takes it."""
        penalties = Penalties(self.frequency_penalty, self.presence_penalty)
        bias = self.logit_bias and LogitBias({int(k): v for k, v in self.logit_bias.items()})
        return RequestOptions(
            self.sampling(), self.seed, tuple(self.stop_strings()), self.rule,
            logprobs=self.requested_logprobs(), penalties=penalties, logit_bias=bias or None,
            grammar=self.output_grammar(), ignore_eos=self.ignore_eos,
        )  # fmt: skip

    def sampling(self) -> SamplingParams:
        """The sampling controls (temperature 0: greedy)."""
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.min_p)

    def output_grammar(self) -> Grammar | None:
        """The grammar the output must follow (None: free text)."""
        return None

    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def requested_tokens(self) -> int | None:
        """The token limit the client asked for, if any."""
        return self.max_tokens

    def requested_logprobs(self) -> int | None:
        """None for no log-probabilities, else how many alternatives each token lists."""
        return None


class ChatRequest(SamplingFields):
    """``POST /v1/chat/completions``. ``tools`` are rendered through the model's chat template and
    its calls parsed back (:mod:`~spec_decode.serving.tool_calls`). Under ``tool_choice`` "auto"
    (the default with tools) the model may call them or answer; "none" leaves them out;
    "required" and a named function constrain the output to calls whose arguments match the
    functions' parameters. ``response_format`` json_object or json_schema constrains the answer
    (with tools under "auto": a call or the formatted answer). ``parallel_tool_calls`` false
    allows one call (the grammar has room for one; an unconstrained answer's later calls are
    not returned)."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)

    @field_validator("top_logprobs")
    @classmethod
    def _top_needs_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")
        return value

    def requested_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @field_validator("tool_choice")
    @classmethod
    def _choice_among_the_tools(cls, choice: Any, info: ValidationInfo) -> Any:
        names = {tool.function.name for tool in info.data.get("tools") or []}
        if isinstance(choice, NamedChoice) and choice.function.name not in names:
            raise ValueError(f"tool_choice names {choice.function.name!r}, not a given tool")
        if choice == "required" and not names:
            raise ValueError("tool_choice required needs tools")
        return choice

    def output_grammar(self) -> Grammar | None:
        formats = self.response_format
        answer = answer_schema(formats.model_dump(by_alias=True) if formats else None)
        functions = [tool.function.model_dump(exclude_none=True) for tool in self.tools or []]
        if self.tool_choice == "none":
            functions = []
        if isinstance(self.tool_choice, NamedChoice):
            functions = [f for f in functions if f["name"] == self.tool_choice.function.name]
        calls_only = self.tool_choice == "required" or isinstance(self.tool_choice, NamedChoice)
        parallel = self.parallel_tool_calls is not False
        return output_grammar(
            answer=answer, functions=functions, calls_only=calls_only, parallel=parallel
        )

    def tool_definitions(self) -> list[dict[str, Any]] | None:
        """The tools as the chat template reads them, or None when the model is given none
        (no tools, or ``tool_choice`` "none")."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [tool.model_dump(exclude_none=True) for tool in self.tools]

    def requested_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``: one prompt, as text or token ids (with a ``suffix``, the text
    before a gap the model fills in)."""

    prompt: str | list[str] | list[int]
    #: The text after the gap: the prompt and it become a fill-in-the-middle prompt in the
    #: model's own FIM tokens (:mod:`spec_decode.backends.fim`).
    suffix: str | None = None
    max_tokens: int | None = Field(default=16, ge=1)  # the OpenAI API's default here
    #: Each token's log-probability with this many alternatives (None: none).
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)

    def requested_logprobs(self) -> int | None:
        return self.logprobs

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str] | list[int]) -> str | list[str] | list[int]:
        if isinstance(value, list) and len(value) > 1 and isinstance(value[0], str):
            raise ValueError("only one prompt per request is supported")
        return value  # an empty one is refused with the others, by the engine

    def prompt_text(self) -> str | None:
        """The prompt as text, or None when it was given as token ids."""
        if isinstance(self.prompt, str):
            return self.prompt
        return self.prompt[0] if self.prompt and isinstance(self.prompt[0], str) else None


def check_fields(body: dict[str, Any], model: type[SamplingFields]) -> dict[str, Any]:
    """``body`` with the fields that change nothing taken out, or an :class:`APIError` (400)
    naming the first field this server does not know or does not implement at its value."""
    not_yet = {ChatRequest: CHAT_NOT_YET, CompletionRequest: COMPLETION_NOT_YET}.get(model, {})
    kept = {}
    for name, value in body.items():
        if name in model.model_fields:
            kept[name] = value
        elif name in not_yet:
            if not any(is_off(value, off) for off in not_yet[name]):
                offs = " or ".join(json.dumps(off) for off in not_yet[name])
                raise APIError(
                    400,
                    f"{name} is not supported yet: it would change the answer (send {offs}, or "
                    "leave it out)",
                    param=name,
                    code="unsupported_field",
                )
        elif name not in NO_EFFECT:
            raise APIError(400, f"unknown field {name!r}", param=name, code="unknown_field")
    return kept


def parse(model: type[SamplingFields], body: dict[str, Any]) -> Any:
    """``body`` validated as ``model`` (after :func:`check_fields`), with strict types (no
    boolean, string or fraction taken for an integer, no string for a number), or an
    :class:`APIError` (400) naming the first problem (:func:`first_problem`)."""
    try:
        return model.model_validate(check_fields(body, model), strict=True)
    except ValidationError as error:
        where, message, first = first_problem(error)
        code = None
        if first["type"] == "extra_forbidden":
            message, code = "unknown field", "unknown_field"
        elif isinstance(first.get("ctx", {}).get("error"), UnsupportedField):
            code = "unsupported_field"
        text = f"{where}: {message}" if where else message
        raise APIError(400, text, param=where or None, code=code) from error


def first_problem(error: ValidationError) -> tuple[str, str, Any]:
    """Where the first problem lies (``messages.0.content``), what it is, and its error.

    A value that fits no member of a union (``stop``: a string or a list of strings) fails once
    per member, each error's location naming the member; the location given leaves the members
    out, and is the deepest any member reached (a text part's ``text``, not the content as a
    whole), with what each member that got that far says."""
    errors = error.errors()
    loc = errors[0]["loc"]
    stem = next((i for i, part in enumerate(loc) if _union_member(part)), None)
    tried = [e for e in errors if e["loc"][:stem] == loc[:stem]] if stem is not None else errors[:1]
    places = [tuple(part for part in e["loc"] if not _union_member(part)) for e in tried]
    deepest = max(places, key=len)  # the first of the deepest
    said = [
        e["msg"].removeprefix("Value error, ")
        for e, at in zip(tried, places, strict=True)
        if at == deepest
    ]
    first = tried[places.index(deepest)]
    return ".".join(str(part) for part in deepest), "; or ".join(dict.fromkeys(said)), first


def _union_member(part: str | int) -> bool:
    """Whether a part of a validation error's location names the member of a union it was
    checked against (``str``, ``list[str]``, ``NamedChoice``, ``literal['none','auto']``), not
    a field: the fields of these schemas are lower-case names."""
    return isinstance(part, str) and (
        part in ("str", "int", "float", "bool") or "[" in part or part[:1].isupper()
    )
