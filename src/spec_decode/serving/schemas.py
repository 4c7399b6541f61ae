"""The request bodies the server accepts (pydantic models of the OpenAI API's fields) and the
OpenAI-style error every refusal is reported with.

Fields follow the OpenAI API (``temperature``, ``top_p``, ``max_tokens`` or
``max_completion_tokens``, ``stop``, ``seed``, ``n``, ``stream``), plus ``top_k`` and ``min_p`` as
llama-server and vLLM accept them (0 or -1 for ``top_k`` means off) and vLLM's
``return_token_ids``. Fields this server does not implement are ignored, as OpenAI-compatible
servers do, except those that would change what is sampled (penalties, logit bias, ``n`` > 1),
which are refused rather than silently dropped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from spec_decode.core.sampling import SamplingParams

#: The chat roles a message may have, and the role the chat template is given for each.
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
#: The most stop strings a request may give (as in the OpenAI API).
MAX_STOP = 4

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


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


class TextPart(BaseModel):
    """One part of a message's content given as a list: text only."""

    type: Literal["text"]
    text: str


class Message(BaseModel):
    """One chat message; ``content`` is a string or a list of text parts."""

    role: str
    content: str | list[TextPart] | None = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
        return role

    def as_template_input(self) -> dict[str, str]:
        """The message as the chat template reads it: role and plain text."""
        content = self.content or ""
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        return {"role": ROLES[self.role], "content": content}


class SamplingFields(BaseModel):
    """What chat and text completions share: the model, sampling controls, limits, stop."""

    model_config = ConfigDict(extra="ignore")

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
    logit_bias: dict[str, float] | None = None

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"temperature must be >= 0, got {value}")
        return value

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, value: float) -> float:
        if not 0 < value <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {value}")
        return value

    @field_validator("min_p")
    @classmethod
    def _min_p(cls, value: float) -> float:
        if not 0 <= value <= 1:
            raise ValueError(f"min_p must lie in [0, 1], got {value}")
        return value

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value: int | None) -> int | None:
        if value is not None and value < -1:
            raise ValueError(f"top_k must be >= 1 (0 or -1: off), got {value}")
        return value if value is not None and value > 0 else None

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

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _no_penalty(cls, value: float) -> float:
        if value != 0:
            raise ValueError("penalties are not supported (they would change what is sampled)")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value:
            raise ValueError("logit_bias is not supported (it would change what is sampled)")
        return value

    def sampling(self) -> SamplingParams:
        """The sampling controls (temperature 0: greedy)."""
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.min_p)

    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def requested_tokens(self) -> int | None:
        """The token limit the client asked for, if any."""
        return self.max_tokens


class ChatRequest(SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def requested_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``: one prompt, as text or token ids."""

    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(default=16, ge=1)  # the OpenAI API's default here

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str] | list[int]) -> str | list[str] | list[int]:
        if isinstance(value, list) and len(value) > 1 and isinstance(value[0], str):
            raise ValueError("only one prompt per request is supported")
        if not value or value == [""]:
            raise ValueError("the prompt is empty")
        return value

    def prompt_text(self) -> str | None:
        """The prompt as text, or None when it was given as token ids."""
        if isinstance(self.prompt, str):
            return self.prompt
        return self.prompt[0] if isinstance(self.prompt[0], str) else None


def parse(model: type[BaseModel], body: Any) -> Any:
    """``body`` validated as ``model``, or an :class:`APIError` (400) naming the first problem."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise APIError(400, f"{where}: {message}" if where else message, param=where) from error
