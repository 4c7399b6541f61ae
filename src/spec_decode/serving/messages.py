"""The parts of a chat request (pydantic models of the OpenAI API's): messages, with their text
parts and earlier tool calls, the tools, a named tool choice and the response format. Every
model forbids keys it does not define: a key a client sends is read or refused, never dropped.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spec_decode.serving.tool_calls import template_messages

#: The chat roles a message may have, and the role the chat template is given for each.
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


class TextPart(BaseModel):
    """One part of a message's content given as a list: text only."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    """The function an assistant message called: its name and arguments (JSON text)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: str


class ToolCallIn(BaseModel):
    """One call in an earlier assistant message (``tool_calls``), as the client sends it back."""

    model_config = ConfigDict(extra="forbid")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    """One chat message; ``content`` is a string or a list of text parts. As in the OpenAI API,
    every message has a ``content`` except an assistant message that carries the ``tool_calls``
    it made (null or left out there), and a ``tool`` message names the ``tool_call_id`` it
    answers. Other keys (``name``, ...) are refused, not dropped."""

    model_config = ConfigDict(extra="forbid")

    role: str
    content: str | list[TextPart] | None = Field(default=None, validate_default=True)
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(default=None, validate_default=True)

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
        return role

    @field_validator("content")
    @classmethod
    def _content_given(cls, content: Any, info: ValidationInfo) -> Any:
        role = info.data.get("role")
        if content is None and role is not None and role != "assistant":
            raise ValueError(f"a {role} message needs content (a string or text parts)")
        return content

    @field_validator("tool_call_id")
    @classmethod
    def _answers_a_call(cls, call_id: str | None, info: ValidationInfo) -> str | None:
        if call_id is None and info.data.get("role") == "tool":
            raise ValueError("a tool message needs the tool_call_id it answers")
        return call_id

    @model_validator(mode="after")
    def _calls_where_they_belong(self) -> Message:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message carries tool_calls")
        if self.tool_call_id is not None and self.role != "tool":
            raise ValueError("only a tool message carries a tool_call_id")
        if self.role == "assistant" and self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        return self

    def as_template_input(self) -> dict[str, Any]:
        """The message as the chat template reads it: role, plain text and, for an assistant's
        calls, the calls with their arguments as objects."""
        content = self.content or ""
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        message: dict[str, Any] = {"role": ROLES[self.role], "content": content}
        if self.tool_calls:
            calls = [call.model_dump() for call in self.tool_calls]
            message = template_messages([{**message, "tool_calls": calls}])[0]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class Function(BaseModel):
    """A function the model may call: name, description and JSON-schema parameters."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    """One entry of ``tools``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: Function


class ChosenFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


class NamedChoice(BaseModel):
    """``tool_choice`` naming one function: ``{"type": "function", "function": {"name": ...}}``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: ChosenFunction


class JSONSchemaFormat(BaseModel):
    """``response_format.json_schema``: the schema the answer must match (``strict`` or not,
    the answer is constrained to it)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """``response_format``: text, any JSON object, or a JSON schema's documents."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_when_asked(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema goes with type json_schema, and only with it")
        return self
