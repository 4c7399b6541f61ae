"""How the server writes an answer: the OpenAI response object, or the events of a stream, with
the usage, the finish reason, the model's tool calls parsed out of its text, and where the
request's time went."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from spec_decode.serving.completion import Completion, speculative_figures
from spec_decode.serving.logprobs import TokenLogprob
from spec_decode.serving.tool_calls import ToolCall, split_tool_calls
from spec_decode.serving.worker import Job


@dataclass(frozen=True)
class Reply:
    """How one request's answer is written: its ``head`` (id, created, model), chat or text
    completion, with each step's token ids or not, with the model's tool calls parsed out of its
    text (``tools``: the names of the tools it may call; :mod:`~spec_decode.serving.tool_calls`)
    or not (``one_call``: the first call only, for ``parallel_tool_calls`` false), and with
    log-probabilities or not (``decode`` writes a token's text for them)."""

    head: dict[str, Any]
    chat: bool
    token_ids: bool = False
    tools: frozenset[str] | None = None
    logprobs: bool = False
    decode: Callable[..., str] | None = None
    one_call: bool = False

    @classmethod
    def new(cls, model: str, chat: bool, **options: Any) -> Reply:
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        return cls({"id": ident, "created": int(time.time()), "model": model}, chat, **options)

    def whole(self, completion: Completion) -> dict[str, Any]:
        """The answer in one response."""
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason(completion)}
        if self.chat:
            content, calls = (
                split_tool_calls(completion.text, self.tools)
                if self.tools is not None
                else (completion.text, [])
            )
            calls = self.kept(calls)
            message: dict[str, Any] = {"role": "assistant", "content": content or None}
            if calls:
                message["tool_calls"] = [call.as_openai() for call in calls]
                choice["finish_reason"] = "tool_calls"
            else:
                message["content"] = content
            choice["message"] = message
        else:
            choice["text"] = completion.text
        choice["logprobs"] = self._logprobs(completion.logprobs or [])
        if self.token_ids:
            choice["token_ids"] = completion.tokens
        return self.head | {"object": self._kind(), "choices": [choice], "usage": usage(completion)}

    def kept(self, calls: list[ToolCall]) -> list[ToolCall]:
        """The calls the client gets: the first alone under ``one_call``."""
        return calls[:1] if self.one_call else calls

    def chunk(
        self,
        text: str,
        tokens: list[int],
        first: bool,
        calls: Sequence[ToolCall] = (),
        logprobs: Sequence[TokenLogprob] = (),
    ) -> dict[str, Any]:
        """One streamed event: a step's text (token ids, log-probabilities), or the tool calls
        at the end."""
        choice: dict[str, Any] = {"index": 0, "finish_reason": None}
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if first else {}
            delta["content"] = text if text or not calls else None
            if calls:
                delta["tool_calls"] = [call.as_openai(i) for i, call in enumerate(calls)]
            choice["delta"] = delta
        else:
            choice["text"] = text
        choice["logprobs"] = self._logprobs(logprobs)
        if self.token_ids:
            choice["token_ids"] = tokens
        return self.head | {"object": self._kind(chunk=True), "choices": [choice]}

    def last_chunk(
        self,
        completion: Completion,
        calls: Sequence[ToolCall],
        logprobs: Sequence[TokenLogprob] = (),
    ) -> dict[str, Any]:
        """The stream's last event: the finish reason, the usage (and the log-probabilities of
        tokens whose text never went out, such as an end-of-generation token)."""
        reason = "tool_calls" if calls else finish_reason(completion)
        end: dict[str, Any] = {"index": 0, "finish_reason": reason}
        end |= {"delta": {}} if self.chat else {"text": ""}
        end["logprobs"] = self._logprobs(logprobs)
        kind = self._kind(chunk=True)
        return self.head | {"object": kind, "choices": [end], "usage": usage(completion)}

    def _logprobs(self, entries: Sequence[TokenLogprob]) -> dict[str, Any] | None:
        """The ``logprobs`` object of a choice (None when not asked for): chat's ``content``
        list, or the text completion's parallel lists."""
        if not self.logprobs:
            return None
        if self.chat:
            return {"content": [self._chat_entry(e) for e in entries], "refusal": None}
        texts = [self._text(e.token) for e in entries]
        offsets = [0, *itertools.accumulate(len(t) for t in texts)][: len(texts)]
        return {
            "tokens": texts,
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{self._text(t): lp for t, lp in e.top} for e in entries],
            "text_offset": offsets,
        }

    def _chat_entry(self, entry: TokenLogprob) -> dict[str, Any]:
        def one(token: int, logprob: float) -> dict[str, Any]:
            text = self._text(token)
            return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

        top = [one(t, lp) for t, lp in entry.top]
        return one(entry.token, entry.logprob) | {"top_logprobs": top}

    def _text(self, token: int) -> str:
        assert self.decode is not None, "a reply with logprobs needs decode"
        return self.decode([token], skip_special_tokens=False)

    def _kind(self, chunk: bool = False) -> str:
        if not self.chat:
            return "text_completion"
        return "chat.completion.chunk" if chunk else "chat.completion"


def finish_reason(completion: Completion) -> str:
    """The OpenAI finish reason: "stop" or "length"; a generation cut by the server's timeout
    or shutdown ends as at a token limit ("length")."""
    return "length" if completion.finish_reason == "cancelled" else completion.finish_reason


def usage(completion: Completion) -> dict[str, Any]:
    """The response's ``usage``: token counts, cached prompt tokens, and what drafting did."""
    n = len(completion.tokens)
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": n,
        "total_tokens": completion.prompt_tokens + n,
        "prompt_tokens_details": {"cached_tokens": completion.cached_tokens},
        "speculative": speculative_figures(completion.trace),
    }


def timings(completion: Completion, job: Job) -> dict[str, float]:
    """Where a request's time went on the server, in milliseconds: waiting in the queue, the
    first step (prompt read plus one pass) and the whole generation."""
    return {
        "queued_ms": 1e3 * (job.started - job.submitted),
        "first_step_ms": 1e3 * completion.first_step_seconds,
        "generation_ms": 1e3 * completion.seconds,
    }
