"""Prompt text to token ids the way each model is meant to be asked."""

from __future__ import annotations

import functools
import inspect
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from spec_decode.core.errors import BadPrompt, BadRequest

#: A transformers tokenizer or :class:`spec_decode.backends.llamacpp.LlamaCppTokenizer`: both
#: have ``chat_template``, ``apply_chat_template``, ``encode`` and ``decode``.
Tokenizer = Any


class SerializedTokenizer:
    """``tokenizer`` with its ``encode``, ``decode`` and ``apply_chat_template`` run one call at a
    time, from any thread; every other attribute is the wrapped tokenizer's.

    A server tokenizes requests on its handlers' threads while the engine's thread decodes the
    text of the running generation, and Hugging Face's Rust tokenizers are not safe to share so:
    two threads in one raise ``RuntimeError: Already borrowed``. One lock that encode and decode
    share costs little (each call is short) and leaves no tokenizer unguarded."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.wrapped = tokenizer
        self._lock = threading.RLock()  # encode_chat's checks encode inside a rendering
        self.encode = self._serialized(tokenizer.encode)
        self.decode = self._serialized(tokenizer.decode)
        self.apply_chat_template = self._serialized(tokenizer.apply_chat_template)

    def _serialized(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)  # keeps the signature, which encode_literally reads
        def serialized(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)

        return serialized

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def encode_prompt(tokenizer: Tokenizer, prompt: str, raw: bool) -> list[int]:
    """Token ids of ``prompt``: through the chat template (one user message, then the assistant
    turn's opening) when the tokenizer has one and not ``raw``; as plain text otherwise."""
    if not raw and tokenizer.chat_template:
        return encode_chat(tokenizer, [{"role": "user", "content": prompt}])
    return tokenizer.encode(prompt)


def prompt_ids(
    tokenizer: Tokenizer,
    prompt: str | Sequence[Mapping[str, Any]] | Sequence[int],
    *,
    raw: bool = False,
    tools: list[dict[str, Any]] | None = None,
) -> list[int]:
    """Token ids of a text prompt (:func:`encode_prompt`), a conversation with the ``tools`` the
    model may call (:func:`encode_chat`), or ids as they are (checked against the model later);
    a :class:`~spec_decode.core.errors.BadRequest` naming the field otherwise."""
    items = [] if isinstance(prompt, str) else list(prompt)
    chat = bool(items) and all(isinstance(item, Mapping) for item in items)
    if tools and not chat:
        raise BadRequest("tools need chat messages", "tools")
    if isinstance(prompt, str):
        return encode_prompt(tokenizer, prompt, raw)
    if chat:
        try:
            return encode_chat(tokenizer, [dict(item) for item in items], tools)
        except BadRequest:
            raise
        except ValueError as error:  # no template, or one that refuses this conversation
            raise BadPrompt(str(error), "messages") from error
    return items


def encode_chat(
    tokenizer: Tokenizer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
) -> list[int]:
    """Token ids of a conversation, and the ``tools`` the model may call (OpenAI function
    definitions), through the model's chat template, ending with the assistant turn's opening
    (``ValueError`` when the tokenizer has no template)."""
    if not tokenizer.chat_template:
        raise ValueError("this model has no chat template; send a plain prompt instead")
    for message in messages:
        check_message_text(tokenizer, str(message.get("content") or ""))
        for call in message.get("tool_calls") or ():
            check_message_text(tokenizer, json.dumps(call, ensure_ascii=False))
    if tools:
        check_message_text(tokenizer, json.dumps(tools, ensure_ascii=False))
    options = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **options
    )
    return tokenizer.encode(text, add_special_tokens=False)


def check_message_text(tokenizer: Tokenizer, text: str) -> None:
    """Refuse message text that spells a control token such as ``<|im_end|>`` (``ValueError``).

    The rendered conversation is tokenized with control-token text parsed, since that is how the
    template's own turn markers become their ids; text a user wrote would be parsed the same way
    and could close its own turn or open another role's. A raw prompt (``--raw``,
    ``/v1/completions``) still passes control tokens through on purpose."""
    parsed = tokenizer.encode(text, add_special_tokens=False)
    literal = encode_literally(tokenizer, text)
    if parsed != literal:
        extra = sorted(set(parsed) - set(literal))
        spelled = [t for t in extra if not tokenizer.decode([t], skip_special_tokens=True)] or extra
        names = ", ".join(repr(tokenizer.decode([t], skip_special_tokens=False)) for t in spelled)
        raise ValueError(
            f"message text spells the control token(s) {names}, which would end or open a chat "
            "turn; remove them, or send a raw prompt to pass control tokens on purpose"
        )


def encode_literally(tokenizer: Tokenizer, text: str) -> list[int]:
    """``text``'s ids with control-token text taken as plain text (llama.cpp's and
    transformers' tokenizers spell the switch differently)."""
    if "parse_special" in inspect.signature(tokenizer.encode).parameters:
        return tokenizer.encode(text, add_special_tokens=False, parse_special=False)
    return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)


def render_chat_template(
    template: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    **special: str,
) -> str:
    """A model's Jinja chat template rendered the way transformers renders it (sandboxed,
    ``trim_blocks`` and ``lstrip_blocks``, loop controls, its ``tojson`` that does not escape
    HTML), with the ``tools`` (None: no tools) and the assistant turn's opening; for tokenizers
    without their own renderer, such as llama.cpp's. ``special`` supplies variables like
    ``bos_token`` that some templates use. Each template is compiled once per process: compiling
    a chat template costs far more than rendering it, and a server renders one per request."""
    return _compiled(template).render(
        messages=messages, tools=tools, add_generation_prompt=True, **special
    )


@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_template_error
    environment.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return environment.from_string(template)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson`` filter: plain JSON (Jinja's own escapes ``<``, ``>``, ``&``)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_template_error(message: str) -> None:
    raise ValueError(f"chat template: {message}")
