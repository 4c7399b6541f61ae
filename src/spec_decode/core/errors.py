"""The errors a request can be refused with, typed so that each caller reports them its own way
(the server as a 400 naming the field, the CLI as exit 2, the library as a ``ValueError``)
without reading their messages."""

from __future__ import annotations


class BadRequest(ValueError):
    """A request that cannot be run as given: ``param`` names the field at fault (None: the
    request as a whole), ``code`` is a machine-readable reason (OpenAI's error codes)."""

    param: str | None = None
    code: str | None = None

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param if param is not None else type(self).param
        self.code = code if code is not None else type(self).code


class BadPrompt(BadRequest):
    """The prompt is empty, holds token ids outside the vocabulary, or cannot be rendered."""

    param = "prompt"


class ContextTooLong(BadRequest):
    """The prompt plus the tokens asked for exceed the model's context window."""

    param = "prompt"
    code = "context_length_exceeded"
