"""Shared toy model pairs for the tests."""

from __future__ import annotations

import contextlib

import pytest

from spec_decode import draft_from_target, random_markov
from spec_decode.backends.llamacpp.library import LibrariesMissing, load

# before the private cache below: every test (and every process a test starts, which inherits
# LLAMA_CPP_LIB_PATH) runs the llama.cpp libraries the CLI would load. Without the [llama] extra
# its tests skip themselves; without a build (spec-decode build-kernels) they fail saying so.
with contextlib.suppress(ModuleNotFoundError, LibrariesMissing):
    load()


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory):
    """Every test writes prepared models and calibrations to a temporary cache, never the
    user's (``SPEC_DECODE_CACHE``)."""
    import os

    before = os.environ.get("SPEC_DECODE_CACHE")
    os.environ["SPEC_DECODE_CACHE"] = str(tmp_path_factory.mktemp("spec-decode-cache"))
    yield
    if before is None:
        del os.environ["SPEC_DECODE_CACHE"]
    else:
        os.environ["SPEC_DECODE_CACHE"] = before


@pytest.fixture
def pair32():
    """A 32-token order-1 target and an 0.8-agreement draft."""
    target = random_markov(32, seed=1)
    return target, draft_from_target(target, 0.8, seed=2)


@pytest.fixture
def small_pair():
    """A 4-token target and a poorly matched draft, so rejections are frequent."""
    target = random_markov(4, seed=1)
    return target, draft_from_target(target, 0.3, seed=2)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny transformers models run fastest on one torch thread; restore the setting afterwards."""
    torch = pytest.importorskip("torch")  # the [hf] extra

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_qwen2():
    """A factory of tiny random Qwen2 causal LMs (transformers), for the backend and CLI tests.

    ``tiny_qwen2(vocab, seed, layers=1, context=64, logit_scale=1.0, **config)`` returns the model
    in eval mode; ``logit_scale`` multiplies the output layer to make its distributions peaked,
    and ``config`` overrides any other ``Qwen2Config`` field (``eos_token_id``, say).
    """
    torch = pytest.importorskip("torch")  # the [hf] extra: a test asking for it is skipped
    pytest.importorskip("transformers")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    def build(
        vocab: int,
        seed: int,
        layers: int = 1,
        context: int = 64,
        logit_scale: float = 1.0,
        **config: object,
    ) -> Qwen2ForCausalLM:
        settings = {
            "vocab_size": vocab,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": context,
            "tie_word_embeddings": False,
            **config,
        }
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(Qwen2Config(**settings))
        with torch.no_grad():
            model.lm_head.weight.mul_(logit_scale)
        return model.eval()

    return build


#: The word vocabulary of :func:`tiny_qwen2_folder`'s tokenizer (id = position; "</s>" ends).
TINY_WORDS = ["<unk>", "</s>", "def", "return", "x", "+", "1", "(", ")", ":"]


@pytest.fixture(scope="session")
def tiny_qwen2_folder(tiny_qwen2):
    """A factory that saves a tiny Qwen2 and a whitespace word tokenizer over ``TINY_WORDS`` as a
    transformers folder: ``tiny_qwen2_folder(folder, seed, vocab=len(TINY_WORDS)) -> folder``."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    def save(folder, seed: int, vocab: int = len(TINY_WORDS)):
        tiny_qwen2(vocab, seed, eos_token_id=1).save_pretrained(folder)
        words = Tokenizer(WordLevel({w: i for i, w in enumerate(TINY_WORDS)}, unk_token="<unk>"))
        words.pre_tokenizer = Whitespace()
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=words, unk_token="<unk>", eos_token="</s>"
        )
        tokenizer.save_pretrained(folder)
        return folder

    return save
