"""How ``/infill`` answers (:mod:`~spec_decode.serving.infill`): llama-server's /completion
shape, and its two ways of ending an editor's suggestion early.

Whole: ``content``, ``stop`` (true), ``model``, ``tokens_predicted``, ``tokens_evaluated`` (the
prompt's tokens), ``tokens`` (the ids, with ``return_tokens``), ``stop_type`` (``eos``, ``word``
for a stop string, ``limit``), ``has_new_line``, ``truncated`` (a part of the prompt was cut to
fit), ``tokens_cached``, ``generation_settings`` (the token limit, seed, sampling controls,
``n_indent``, ``t_max_predict_ms``, stop strings, and ``samplers``: the sampler that ran),
``timings`` (llama-server's fields: ``prompt_n`` the prompt tokens not reused from the cache,
``prompt_ms`` the first step's time, the prompt read plus one pass, ``predicted_n`` and
``predicted_ms`` the rest) and, as the server's other routes, ``usage`` and ``engine_timings``.
``response_fields`` keeps only the fields it names, by path (``timings/prompt_n``), as flat keys.
Streamed: one ``{"content", "stop": false, "tokens_predicted", ...}`` event per step with text,
then the whole answer's fields with an empty ``content``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spec_decode.serving.completion import Completion, Piece
from spec_decode.serving.replies import timings, usage
from spec_decode.serving.text import REPLACEMENT
from spec_decode.serving.worker import Job

_INDENT = re.compile(r"[ \t]*")


class Limits:
    """llama-server's ``n_indent`` and ``t_max_predict_ms``, applied to the text as it is
    released: the text ends after the indentation of the first line (past the first) that is
    indented by fewer than ``n_indent`` spaces or tabs and has anything after that (a blank line
    too), and, once ``max_ms`` milliseconds have passed since the first step, after its next
    line break. :meth:`take` filters each step's piece (what of its text and tokens goes out);
    once the text ended, ``cancel`` is set, so that no further step runs, and :attr:`kept` is
    how many tokens the answer holds: up to the one that wrote the character that ended it, as
    llama-server counts them (a step may have emitted more: a drafted block accepted whole).
    ``decode`` writes token ids as text."""

    def __init__(
        self, n_indent: int, max_ms: int, cancel: threading.Event, decode: Callable[..., str]
    ) -> None:
        self.n_indent, self.max_s, self.cancel, self.decode = n_indent, max_ms / 1e3, cancel, decode
        self.text = ""
        self.tokens: list[int] = []
        self.kept: int | None = None
        self._start: float | None = None

    @property
    def cut(self) -> bool:
        return self.kept is not None

    def take(self, piece: Piece) -> Piece:
        """The piece with the text and tokens that go out (none once the text ended)."""
        if self.kept is not None:
            return Piece([], "", None)
        if self._start is None:
            self._start = time.perf_counter()
        old, before = len(self.text), len(self.tokens)
        text = self.text + piece.text
        self.tokens += piece.tokens
        ends = []  # (the character that ends the text, where the text ends)
        if self.n_indent and (end := indent_end(text, self.n_indent, old)) is not None:
            ends.append((end, end))
        late = self.max_s and time.perf_counter() - self._start > self.max_s
        if late and (newline := text.find("\n", old)) >= 0:
            ends.append((newline, newline + 1))
        if not ends:
            self.text = text
            return piece
        last, end = min(ends)
        self.kept = max(covering(self.decode, self.tokens, last), before)
        self.text = text[:end]
        self.cancel.set()
        return Piece(self.tokens[before : self.kept], self.text[old:], None)


def covering(decode: Callable[..., str], tokens: list[int], position: int) -> int:
    """The fewest of ``tokens`` whose text reaches past ``position`` (all when none do), by
    bisection on the length of their text (a cut multi-byte character not counted)."""
    low, high = 0, len(tokens)
    while low < high:
        middle = (low + high) // 2
        written = decode(tokens[: middle + 1], skip_special_tokens=True).rstrip(REPLACEMENT)
        if len(written) > position:
            high = middle
        else:
            low = middle + 1
    return min(low + 1, len(tokens))


def indent_end(text: str, n_indent: int, start: int = 0) -> int | None:
    """Where ``n_indent`` ends ``text`` (see :class:`Limits`), looking at the lines from the one
    that holds ``start`` on; None when none ends it."""
    position = max(text.rfind("\n", 0, start), 0)
    while (newline := text.find("\n", position)) >= 0:
        line = newline + 1
        end = _INDENT.match(text, line).end()  # type: ignore[union-attr]  # it always matches
        if end < len(text) and end - line < n_indent:
            return end
        position = line
    return None


@dataclass(frozen=True)
class InfillReply:
    """How one ``/infill`` request is answered: the served ``model`` name, the request's
    ``body``, its prompt's length and whether a part of the prompt was ``cut``."""

    model: str
    body: Any  # an InfillRequest
    prompt_tokens: int
    cut: bool

    def chunk(self, text: str, tokens: list[int], predicted: int) -> dict[str, Any]:
        """One streamed step."""
        return {
            "index": 0, "content": text, "tokens": tokens if self.body.wants_tokens() else [],
            "stop": False, "tokens_predicted": predicted, "tokens_evaluated": self.prompt_tokens,
        }  # fmt: skip

    def whole(
        self, completion: Completion, limits: Limits, job: Job, streamed: bool = False
    ) -> dict[str, Any]:
        """The answer (streamed: the last event, its content sent already)."""
        text = limits.text if limits.cut else completion.text
        tokens = completion.tokens[: limits.kept]  # all when not cut
        kind = "limit"
        if completion.finish_reason == "stop" and not limits.cut:
            kind = "eos" if completion.end_token else "word"
        first_s = completion.first_step_seconds
        speeds = _timings(
            completion.prompt_tokens - completion.cached_tokens, first_s,
            len(tokens), completion.seconds - first_s,
        )  # fmt: skip
        extra = {"usage": usage(completion), "engine_timings": timings(completion, job)}
        return self._answer("" if streamed else text, tokens, kind, "\n" in text, speeds, extra)

    def nothing(self) -> dict[str, Any]:
        """The answer to ``n_predict`` 0: the prompt read, nothing written."""
        return self._answer("", [], "limit", False, _timings(self.prompt_tokens, 0, 0, 0), {})

    def _answer(
        self,
        text: str,
        tokens: list[int],
        kind: str,
        new_line: bool,
        speeds: dict[str, float],
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        answer = {
            "index": 0, "content": text, "tokens": tokens if self.body.wants_tokens() else [],
            "stop": True, "model": self.model, "tokens_predicted": len(tokens),
            "tokens_evaluated": self.prompt_tokens, "stop_type": kind, "has_new_line": new_line,
            "truncated": self.cut, "tokens_cached": self.prompt_tokens + len(tokens),
            "generation_settings": self.settings(), "timings": speeds, **extra,
        }  # fmt: skip
        return pick(self.body.response_fields, answer)

    def settings(self) -> dict[str, Any]:
        """The request's settings as they ran: ``samplers`` the controls that apply, in the
        order this server applies them."""
        body = self.body
        sampling = body.sampling()
        chain = ["temperature"] if sampling.temperature > 0 else ["greedy"]
        if sampling.temperature > 0:
            chain += ["top_k"] * (sampling.top_k is not None) + ["top_p"] * (sampling.top_p < 1)
            chain += ["min_p"] * (sampling.min_p > 0)
        return {
            "n_predict": body.requested_tokens() or -1, "seed": body.seed,
            "temperature": sampling.temperature, "top_k": sampling.top_k or 0,
            "top_p": sampling.top_p, "min_p": sampling.min_p, "n_indent": body.n_indent,
            "t_max_predict_ms": body.t_max_predict_ms, "stop": body.stop_strings(),
            "samplers": chain,
        }  # fmt: skip


def _timings(prompt_n: int, prompt_s: float, predicted_n: int, predicted_s: float) -> dict:
    """llama-server's ``timings``."""

    def rates(name: str, n: int, seconds: float) -> dict[str, float]:
        return {
            f"{name}_n": n,
            f"{name}_ms": 1e3 * seconds,
            f"{name}_per_token_ms": 1e3 * seconds / n if n else 0.0,
            f"{name}_per_second": n / seconds if seconds > 0 else 0.0,
        }

    return rates("prompt", prompt_n, prompt_s) | rates("predicted", predicted_n, predicted_s)


def pick(paths: list[str] | None, answer: dict[str, Any]) -> dict[str, Any]:
    """Only the fields ``paths`` name (none given: all), as llama-server's ``response_fields``
    keeps them: a path's parts split at ``/`` lead into nested objects, each value found is
    kept under its whole path, and a path that leads nowhere is left out."""
    if not paths:
        return answer
    kept = {}
    for path in paths:
        value: Any = answer
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            kept[path] = value
    return kept
