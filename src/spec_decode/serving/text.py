"""The text of a growing list of tokens, released as soon as it is final, cut at stop strings.

A generation emits tokens a step at a time; a streaming client wants text. Two things make the
text of the tokens so far provisional: a multi-byte character may be split between tokens (the
tail decodes to U+FFFD until its last byte arrives), and the end may be the beginning of a stop
string, which must not be shown if it completes. :class:`IncrementalText` holds both back (only
the characters that could still begin a stop string) and releases the rest; once a stop string
appears, the text ends right before it (the OpenAI API's ``stop`` semantics: the stop string
is not returned).

Decoding the whole list after every step would cost time quadratic in the output, so the text
is anchored at the last token boundary where it was clean (no trailing U+FFFD) and only the
tokens since are decoded, together with the token before them so that tokenizers that drop a
leading space at the start of a decode still produce the right text.
"""

from __future__ import annotations

from collections.abc import Sequence

from spec_decode.backends.prompts import Tokenizer

REPLACEMENT = "\ufffd"


def held_back(text: str, markers: Sequence[str]) -> int:
    """How many characters at the end of ``text`` begin one of ``markers`` (and so must wait
    for the next piece before they can be released), at most one less than the longest."""
    longest = max((len(m) for m in markers), default=1)
    for n in range(min(longest - 1, len(text)), 0, -1):
        if any(m.startswith(text[-n:]) for m in markers):
            return n
    return 0


class IncrementalText:
    """The text of tokens added with :meth:`add`, released in final pieces, cut at ``stop``
    (non-empty strings, as :class:`~spec_decode.serving.request.Request` checks them)."""

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.tokens: list[int] = []
        self.stopped = False
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self._anchor = 0  # tokens[:anchor] decode to _anchored, ending at a clean boundary
        self._anchored = ""
        self._text = ""  # the decoded text of every token so far
        self._searched = 0  # stop strings were looked for in _text[:searched]
        self._released = 0

    @property
    def text(self) -> str:
        """The text so far: cut right before the stop string once one appeared."""
        return self._text

    def add(self, tokens: Sequence[int]) -> str:
        """Append a step's tokens; return the text that became final (possibly empty)."""
        if self.stopped:
            return ""
        self.tokens.extend(int(t) for t in tokens)
        self._text = self._decode()
        self._find_stop()
        if self.stopped:
            return self._release(len(self._text))
        clean = self._text.rstrip(REPLACEMENT)
        return self._release(len(clean) - held_back(clean, self.stop))

    def finish(self) -> str:
        """The text still held back, once generation has ended."""
        return self._release(len(self._text))

    def _release(self, end: int) -> str:
        if end <= self._released:
            return ""
        piece, self._released = self._text[self._released : end], end
        return piece

    def _find_stop(self) -> None:
        start = max(0, self._searched - self._hold)
        cuts = [i for i in (self._text.find(s, start) for s in self.stop) if i >= 0]
        if cuts:
            self._text, self.stopped = self._text[: min(cuts)], True
        self._searched = len(self._text.rstrip(REPLACEMENT))  # a trailing U+FFFD may change

    def _decode(self) -> str:
        decode, a = self.tokenizer.decode, self._anchor
        if a == 0:
            text = decode(self.tokens, skip_special_tokens=True)
        else:
            both = decode(self.tokens[a - 1 :], skip_special_tokens=True)
            last = decode(self.tokens[a - 1 : a], skip_special_tokens=True)
            if both.startswith(last):
                text = self._anchored + both[len(last) :]
            else:  # a tokenizer whose pieces do not concatenate: decode everything
                text = decode(self.tokens, skip_special_tokens=True)
        if not text.endswith(REPLACEMENT):
            self._anchor, self._anchored = len(self.tokens), text
        return text
