"""llguidance's grammar as a processor under speculation: the real matcher, on a toy byte
vocabulary, enumerated down every path of the real generator (exact, bookkeeping checked), per
seed identical to target-only decoding under the coupled rule, and failing when the mask is
skipped inside drafts; its rollback leaves no trace of a rejected path."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("llguidance")

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.certify.exhaustive import exact_distribution, exact_output_distribution
from spec_decode.certify.generators import chain_generator
from spec_decode.certify.identity import identity_certificate, target_only_run
from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.certify.zoo.processors import DraftsUnprocessed
from spec_decode.constraints.formats import output_grammar
from spec_decode.constraints.grammar import GrammarMask, check_grammar, grammar_tokenizer
from spec_decode.core.coupled import coupled_rule
from spec_decode.core.errors import BadRequest
from spec_decode.core.processors import ProcessedModel
from spec_decode.core.rules import exact_rule
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.speculative import generate_speculative

#: End of generation, then the bytes of JSON strings over two letters.
TOKENS = [b"", b'"', b"a", b"b"]
EOS, PROMPT = 0, [2, 3]
#: Answers that are one of three JSON strings: '"ab"', '"ba"' or '"a"', then the end token.
SCHEMA = {"enum": ["ab", "ba", "a"]}


class ToyTokenizer:
    """What grammar_tokenizer reads of a llama.cpp tokenizer: pieces and encoding."""

    def piece(self, token: int, special: bool = False) -> bytes:
        return b"<end>" if token == EOS and special else TOKENS[token]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [TOKENS.index(bytes([byte])) for byte in text.encode()]


@pytest.fixture(scope="module")
def tokenizer():
    return grammar_tokenizer(ToyTokenizer(), len(TOKENS), {EOS})


def grammar():
    return output_grammar(answer=SCHEMA)


def models(tokenizer, variant=ProcessedModel):
    target = random_markov(len(TOKENS), seed=7, concentration=0.6)
    draft = draft_from_target(target, 0.5, seed=8)
    start = len(PROMPT)
    return (
        variant(target, [GrammarMask(grammar(), tokenizer)], start),
        ProcessedModel(draft, [GrammarMask(grammar(), tokenizer)], start),
        ProcessedModel(target, [GrammarMask(grammar(), tokenizer)], start),
    )


def test_the_mask_admits_exactly_the_schema(tokenizer):
    target, _, _ = models(tokenizer)
    texts = {}
    for seed in range(200):
        rng = np.random.default_rng(seed)
        drafter = PromptLookupDrafter(len(TOKENS), max_ngram=1)
        tokens = generate_speculative(target, None, PROMPT, 5, 2, rng, drafter=drafter).tokens
        end = tokens.index(EOS)
        texts[b"".join(TOKENS[t] for t in tokens[:end])] = True
    assert {json.loads(text) for text in texts} == set(SCHEMA["enum"])


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(0.0)], ids=["T=1", "greedy"])
@pytest.mark.parametrize("rule", [exact_rule, coupled_rule], ids=["standard", "coupled"])
def test_speculation_under_the_grammar_is_exact_by_enumeration(tokenizer, rule, sampling):
    target, draft, _ = models(tokenizer)
    result = exact_output_distribution(target, draft, PROMPT, 5, 3, sampling=sampling, rule=rule)
    assert abs(result.total_probability - 1) < 1e-12
    assert result.tv < TV_TOLERANCE


def test_lookup_drafts_the_grammar_refuses_are_rejected_exactly(tokenizer):
    target, _, _ = models(tokenizer)
    drafter = PromptLookupDrafter(len(TOKENS), max_ngram=1)  # drafts "ab"-like repeats
    result = exact_output_distribution(target, None, PROMPT, 5, 3, drafter=drafter)
    assert result.tv < TV_TOLERANCE


def test_a_mask_skipped_inside_drafts_fails_the_enumeration(tokenizer):
    wrong, draft, right = models(tokenizer, DraftsUnprocessed)
    generate = chain_generator(wrong, draft, PROMPT, 3)
    assert exact_distribution(generate, right, PROMPT, 5).tv > 0.01


@pytest.mark.parametrize("sampling", [SamplingParams(0.0), SamplingParams(0.8)], ids=str)
def test_coupled_output_under_the_grammar_is_target_only_output(tokenizer, sampling):
    target, draft, reference = models(tokenizer)

    def speculative(source, n):
        return generate_speculative(
            target, draft, PROMPT, n, 3, source, sampling=sampling, rule=coupled_rule
        )

    certificate = identity_certificate(
        speculative, target_only_run(reference, PROMPT, sampling), range(40), 5
    )
    assert certificate.passed, certificate.mismatched
    assert certificate.accepted > 0


def test_rolling_back_a_rejected_path_leaves_the_mask_as_it_was(tokenizer):
    fresh, walked = GrammarMask(grammar(), tokenizer), GrammarMask(grammar(), tokenizer)
    rows = np.ones((4, len(TOKENS)))
    walked.process([], [(), (1,), (1, 2), (1, 2, 3)], rows.copy())  # a drafted path, then
    after_walk, after_fresh = rows[:1].copy(), rows[:1].copy()
    walked.process([1], [()], after_walk)  # the step kept '"' only
    fresh.process([1], [()], after_fresh)
    assert np.array_equal(after_walk, after_fresh)
    refused = rows[:1].copy()
    walked.process([3], [()], refused)  # a history the grammar refuses: the row is left as it is
    assert np.array_equal(refused, rows[:1])


def test_a_grammar_the_vocabulary_cannot_write_is_refused(tokenizer):
    check_grammar(grammar(), tokenizer)
    with pytest.raises(BadRequest, match="cannot write") as error:
        check_grammar(output_grammar(answer={"type": "integer"}), tokenizer)  # no digits
    assert error.value.param == "response_format"


def test_once_the_grammar_is_done_only_the_end_token_is_allowed(tokenizer):
    mask, rows = GrammarMask(grammar(), tokenizer), np.ones((1, len(TOKENS)))
    mask.process([1, 2, 3, 1], [()], rows)  # '"ab"': nothing may follow
    assert rows.tolist() == [[1.0, 0.0, 0.0, 0.0]]
