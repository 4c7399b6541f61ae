"""Engines to audit end to end (:mod:`~spec_decode.certify.engine_audit`), on a toy Markov pair:
this project's own ``generate_speculative`` (which must PASS) and a zoo of whole-loop bugs that
shipped in real engines (each must FAIL).

The zoo runs one small, explicit speculative loop (:func:`speculative_loop`) with one thing done
wrong (the bugs show under warped sampling, e.g. temperature 0.7 and top-k 3):

* ``raw-q``: the draft samples from the warped draft distribution but the rule is given the raw
  one (Hugging Face candidate generators, transformers #47932 / #47961);
* ``greedy-draft``: the draft proposes its argmax under a sampling target and reports its
  distribution as q (HF PR #30778, #32867);
* ``stale-cache``: after a rejection, the next step's target and draft read a context that still
  ends with the rejected draft (a KV cache not rolled back);
* ``committed-penalty``: this project's loop under frequency and presence penalties, but each
  verified row's penalty counted from the committed tokens only (vLLM #22987);
* ``batch-variant``: this project's loop on a target whose drafted blocks score rows a little
  off its one-token rows (llama.cpp's batch variance, :mod:`~spec_decode.certify.zoo.targets`);

and one exact control, ``control:no-bonus`` (after K acceptances no bonus token is drawn and
the next step starts afresh: slower, not wrong, since every emitted token is still a sample of
the target given what came before), which must PASS: the audit flags bias, not inefficiency.
``ours:penalties`` is this project's loop under the same penalties done right (every row
counted with the drafts before it): it must PASS. Penalties here count the whole context, the
prompt too (as a repetition penalty does), since an adapter's ``target_probs`` is given a
context, not where its prompt ends.

``ENGINES`` maps each name to a factory; ``spec-decode audit-engine NAME`` audits one, and
``module:factory`` any object with the three methods of
:class:`~spec_decode.certify.engine_audit.EngineAdapter`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from spec_decode.certify.engines_hf import MODES as HF_MODES
from spec_decode.certify.engines_llamaserver import MODES as LLAMA_SERVER_MODES
from spec_decode.certify.zoo.processors import CommittedPrefixOnly
from spec_decode.certify.zoo.targets import BatchVariant
from spec_decode.core.models import MarkovModel, Model, draft_from_target, random_markov
from spec_decode.core.processors import Penalties, ProcessedModel
from spec_decode.core.rules import residual
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.speculative import generate_speculative

#: The toy pair every built-in engine runs: 6 tokens, order 1, a draft that agrees 60 %.
VOCAB, K = 6, 3
#: The penalties of ``ours:penalties`` and ``zoo:committed-penalty``.
PENALTIES = Penalties(frequency=0.8, presence=0.4)


def toy_pair() -> tuple[MarkovModel, MarkovModel]:
    target = random_markov(VOCAB, seed=7, concentration=0.7)
    return target, draft_from_target(target, agreement=0.6, seed=8)


@dataclass
class ToyEngine:
    """An engine on the toy pair; ``bug`` None runs this project's ``generate_speculative``
    (under :data:`PENALTIES` when ``penalized``), a bug of :data:`TARGET_BUGS` runs it on a
    broken target, any other zoo name runs :func:`speculative_loop` with that bug."""

    bug: str | None = None
    penalized: bool = False

    def __post_init__(self) -> None:
        self.target, self.draft = toy_pair()
        self.vocab_size = self.target.vocab_size
        self.penalized = self.penalized or self.bug == "committed-penalty"

    def target_probs(self, prefix: Sequence[int], sampling: SamplingParams) -> np.ndarray:
        return sampling.warp(self._reference().next_dist(prefix))

    def generate(
        self, prefix: Sequence[int], n_tokens: int, sampling: SamplingParams, seed: int
    ) -> list[int]:
        rng = np.random.default_rng(seed)
        if self.bug is None or self.bug in TARGET_BUGS:
            target, draft = self._verified(), self._reference(self.draft)
            trace = generate_speculative(target, draft, prefix, n_tokens, K, rng, sampling=sampling)
            return trace.tokens
        return speculative_loop(self.target, self.draft, prefix, n_tokens, rng, sampling, self.bug)

    def _reference(self, model: Model | None = None) -> Model:
        """The target (or ``model``) as plain decoding reads it: penalized when asked."""
        model = model or self.target
        return ProcessedModel(model, [PENALTIES], start=0) if self.penalized else model

    def _verified(self) -> Model:
        """The target as the speculative loop reads it: right, or with the target's bug."""
        if self.bug == "committed-penalty":
            return CommittedPrefixOnly(self.target, [PENALTIES], start=0)
        if self.bug == "batch-variant":
            return BatchVariant(self.target)
        return self._reference()


def speculative_loop(
    target: MarkovModel,
    draft: MarkovModel,
    prefix: Sequence[int],
    n_tokens: int,
    rng: np.random.Generator,
    sampling: SamplingParams,
    bug: str,
) -> list[int]:
    """The textbook loop (draft K, accept x with min(1, p/q), on the first rejection a sample
    of the residual, after K acceptances a bonus token), with ``bug`` done wrong."""
    context, emitted = list(prefix), []
    while len(emitted) < n_tokens:
        drafted, qs = [], []
        for _ in range(K):
            raw_q = draft.next_dist(context + drafted)
            q = sampling.warp(raw_q)
            token = int(np.argmax(q)) if bug == "greedy-draft" else int(rng.choice(len(q), p=q))
            drafted.append(token)
            qs.append(raw_q if bug == "raw-q" else q)
        accepted, cut = [], None
        for i, (token, q) in enumerate(zip(drafted, qs, strict=True)):
            p = sampling.warp(target.next_dist(context + drafted[:i]))
            if q[token] > 0 and rng.random() < min(1.0, p[token] / q[token]):
                accepted.append(token)
                continue
            cut = int(rng.choice(len(p), p=residual(p, q)))
            break
        if cut is None and bug != "no-bonus":
            bonus = sampling.warp(target.next_dist(context + accepted))
            cut = int(rng.choice(len(bonus), p=bonus))
        step = accepted + ([cut] if cut is not None else [])
        emitted += step
        if bug == "stale-cache" and len(accepted) < K:
            # the cache still holds the rejected draft, not the token emitted in its place
            context = context + accepted + [drafted[len(accepted)]]
        else:
            context = context + step
    return emitted[:n_tokens]


#: The zoo's bugs (each must FAIL) and the exact control (must PASS); the bugs of the target
#: run this project's own loop.
TARGET_BUGS = ("committed-penalty", "batch-variant")
BUGS = ("raw-q", "greedy-draft", "stale-cache", *TARGET_BUGS)
CONTROLS = ("no-bonus",)


def _hf(mode: str) -> Callable[[], object]:
    def make() -> object:
        from spec_decode.certify.engines_hf import HFEngine  # needs the hf extra

        return HFEngine(mode)

    return make


def _llama_cpp_python(mode: str) -> Callable[[], object]:
    def make() -> object:
        from spec_decode.certify.engines_llamacpp import LlamaCppPythonEngine  # the llama extra

        return LlamaCppPythonEngine(mode)

    return make


def _llama_server(mode: str) -> Callable[[], object]:
    def make() -> object:
        from spec_decode.certify.engines_llamaserver import LlamaServerEngine

        return LlamaServerEngine(mode, threads=2)

    return make


def _vllm(mode: str) -> Callable[[], object]:
    def make() -> object:
        from spec_decode.certify.engines_vllm import VLLMEngine

        return VLLMEngine(mode)

    return make


#: name -> factory of each built-in engine (the ``hf:`` ones are transformers' own
#: generation, :mod:`~spec_decode.certify.engines_hf`; the ``llama-cpp-python:`` ones
#: llama-cpp-python's, :mod:`~spec_decode.certify.engines_llamacpp`; the ``llama-server:`` ones
#: llama.cpp's server on the packaged target, :mod:`~spec_decode.certify.engines_llamaserver`;
#: the ``vllm:`` ones vLLM's CPU build on a tiny model, :mod:`~spec_decode.certify.engines_vllm`).
ENGINES: dict[str, Callable[[], object]] = {
    "ours": ToyEngine,
    "ours:penalties": lambda: ToyEngine(penalized=True),
    **{f"zoo:{bug}": (lambda bug=bug: ToyEngine(bug)) for bug in BUGS},
    **{f"control:{bug}": (lambda bug=bug: ToyEngine(bug)) for bug in CONTROLS},
    **{f"hf:{mode}": _hf(mode) for mode in HF_MODES},
    **{f"llama-cpp-python:{mode}": _llama_cpp_python(mode) for mode in ("prompt-lookup", "plain")},
    **{f"llama-server:{mode}": _llama_server(mode) for mode in LLAMA_SERVER_MODES},
    **{f"vllm:{mode}": _vllm(mode) for mode in ("ngram", "plain")},
}
