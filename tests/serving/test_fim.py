"""Fill-in-the-middle on tiny GGUF models whose vocabulary holds Qwen2.5-Coder's FIM tokens (as
control tokens, found by their text): ``/infill`` as llama.vim and llama.vscode call it and
``/v1/completions`` with a ``suffix`` as Continue calls it, whole and streamed, give the tokens
target-only decoding gives for the same FIM prompt, greedy and seeded; the prompt follows
llama-server's layout and budget; an answer cut by ``n_indent`` is target-only decoding's cut;
``response_fields`` and ``n_predict: 0`` behave as llama-server's; and a model without FIM tokens
(the tiny pair) is refused with a 400 naming the field. (:mod:`test_infill_reply`: the parts
that need no model.)"""

from __future__ import annotations

import asyncio
import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")
pytest.importorskip("prometheus_client")

from conftest import EOS, JSON_VOCABULARY  # noqa: E402

from spec_decode.backends.fim import (  # noqa: E402
    encode_fim,
    encode_infill,
    extra_context,
    fim_tokens,
)
from spec_decode.backends.prompts import encode_literally  # noqa: E402
from spec_decode.certify.tiny_gguf import perturbed, tiny_weights, write_gguf  # noqa: E402
from spec_decode.core.sampling import SamplingParams  # noqa: E402
from spec_decode.serving.config import EngineConfig  # noqa: E402
from spec_decode.serving.engine import Engine  # noqa: E402
from spec_decode.serving.infill_reply import covering, indent_end  # noqa: E402
from spec_decode.serving.request import RequestOptions  # noqa: E402
from spec_decode.serving.server import create_app  # noqa: E402
from spec_decode.serving.state import Settings  # noqa: E402
from spec_decode.serving.worker import Job, Worker  # noqa: E402

FIM = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
       "<|file_sep|>"]  # fmt: skip
VOCABULARY = [*JSON_VOCABULARY, *FIM]
PRE, MID, SUF, PAD, REP, SEP = (VOCABULARY.index(token) for token in FIM)
MODEL, LIMIT, CONTEXT, N = "target", 64, 1024, 24

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n    return total\n\nprint(add(1, 2))\n"
EXTRA = [{"filename": "util.py", "text": "def total(xs):\n    return sum(xs)\n"}]

#: llama.vim's request (autoload/llama.vim, llama#fim): its chunks carry a ``time`` (a reltime()
#: list), and it names the answer's fields it reads.
LLAMA_VIM = {
    "input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "to",
    "input_extra": [chunk | {"time": [1712345678, 123456]} for chunk in EXTRA],
    "n_predict": N, "n_indent": 0, "top_k": 40, "top_p": 0.90,
    "samplers": ["top_k", "top_p", "infill"], "stream": False, "cache_prompt": True,
    "t_max_prompt_ms": 500, "t_max_predict_ms": 60_000,
    "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms",
                        "timings/prompt_per_token_ms", "timings/prompt_per_second",
                        "timings/predicted_n", "timings/predicted_ms",
                        "timings/predicted_per_token_ms", "timings/predicted_per_second",
                        "truncated", "tokens_cached"],
}  # fmt: skip
#: llama.vscode's request (src/llama-server.ts: its default parameters, no n_indent when 0).
LLAMA_VSCODE = {
    "input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": EXTRA, "prompt": "to",
    "n_predict": N, "top_k": 40, "top_p": 0.99, "stream": False,
    "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True,
    "t_max_prompt_ms": 500, "t_max_predict_ms": 60_000,
}  # fmt: skip
#: Continue's FIM request to an OpenAI-compatible server (its openai adapter's fimStream).
#: Continue's stop strings for a Qwen coder model: its FIM template's, then its common ones.
CONTINUE_STOPS = [
    "<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>", "/src/", "#- coding: utf-8",
    "```", "\n\n",
]  # fmt: skip
CONTINUE = {
    "model": MODEL, "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": N, "temperature": 0.0,
    "top_p": 1.0, "stop": CONTINUE_STOPS, "stream": True,
}  # fmt: skip
#: (temperature, seed): greedy, and seeded sampling (the coupled rule: token-identical).
CONTROLS = {"greedy": (0.0, None), "seeded": (0.7, 11)}


@pytest.fixture(scope="module")
def fim_pair(tmp_path_factory):
    """Target and draft over :data:`VOCABULARY`; the rows of the end-of-generation tokens (EOS
    and, as llama.cpp counts them, <|fim_pad|>, <|repo_name|>, <|file_sep|>) are zero, so that
    generations run to their limit."""
    folder = tmp_path_factory.mktemp("fim-gguf")
    target = tiny_weights(5, logit_scale=6.0, vocab=len(VOCABULARY))
    target["output.weight"][[EOS, PAD, REP, SEP]] = 0.0
    draft = perturbed(target, 6, 0.05)
    return tuple(
        write_gguf(folder / f"{name}.gguf", weights, VOCABULARY, context=CONTEXT)
        for name, weights in (("target", target), ("draft", draft))
    )


def serve(target, draft: str):
    """A worker on the pair (``draft``: the draft model's file or "lookup"), drafting 3
    tokens every step, and the app over it."""
    config = EngineConfig(target=str(target), draft=draft, threads=1, policy="fixed", k=3)
    worker = Worker(lambda: Engine.load(config), max_queue=4)
    return worker, create_app(worker, Settings(MODEL, max_tokens=LIMIT))


@pytest.fixture(scope="module")
def servers(fim_pair):
    """One server drafting with the draft model, one with prompt lookup (drafts copied from the
    prompt, the suffix and extra context included), by name."""
    target, draft = fim_pair
    running = {"model": serve(target, str(draft)), "lookup": serve(target, "lookup")}
    yield running
    for worker, _ in running.values():
        worker.close(0)
        worker.join()


@pytest.fixture(scope="module")
def plain(tiny_pair):
    """A server on the tiny pair, whose vocabulary has no FIM tokens."""
    target, draft = tiny_pair
    worker, app = serve(target, str(draft))
    yield app
    worker.close(0)
    worker.join()


def post(app, path: str, body: dict) -> httpx.Response:
    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, json=body)

    return asyncio.run(send())


def events(response: httpx.Response) -> list[dict]:
    """A stream's events (``[DONE]`` left out)."""
    lines = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def target_only(worker: Worker, ids: list[int], temperature: float, seed, n=N, **sampling):
    """The ``n`` tokens target-only decoding gives for ``ids``, run on the worker."""
    engine = worker.engine
    request = engine.prepare(
        ids,
        RequestOptions(
            sampling=SamplingParams(temperature, **sampling), seed=seed, target_only=True
        ),
        max_tokens=n,
        raw=True,
    )
    return worker.submit(Job(request)).result().tokens


def infill_ids(engine: Engine, body: dict, n: int = N) -> list[int]:
    extra = [(chunk["filename"], chunk["text"]) for chunk in body["input_extra"]]
    ids, cut = encode_infill(
        engine.tokenizer, fim_tokens(engine.tokenizer), body["input_prefix"],
        body["input_suffix"], extra, body["prompt"], context=engine.context_window, max_tokens=n,
    )  # fmt: skip
    assert not cut
    return ids


def test_the_fim_tokens_are_found_by_their_text(servers, plain):
    tokenizer = servers["model"][0].engine.tokenizer
    found = fim_tokens(tokenizer)
    assert (found.pre, found.suf, found.mid, found.rep, found.sep) == (PRE, SUF, MID, REP, SEP)
    assert tokenizer.fim_tokens() == {
        "pre": PRE, "suf": SUF, "mid": MID, "pad": PAD, "rep": REP, "sep": SEP
    }  # fmt: skip
    assert found.bos == ()  # the tiny vocabulary adds no BOS, as Qwen's does not

    class ByText:  # a tokenizer that cannot say (as transformers' cannot): looked up by text
        encode = staticmethod(tokenizer.encode)

    assert fim_tokens(ByText()) == found
    assert fim_tokens(plain.state.served.engine.tokenizer) is None


def test_the_prompt_is_llama_servers(servers):
    tokenizer = servers["model"][0].engine.tokenizer
    ids = infill_ids(servers["model"][0].engine, LLAMA_VSCODE)

    def text(value: str) -> list[int]:
        return encode_literally(tokenizer, value)

    typed = tokenizer.encode("to", add_special_tokens=False)
    expected = [REP, *text("myproject\n"), SEP, *text("util.py\n"), *text(EXTRA[0]["text"]),
                SEP, *text("filename\n"), PRE, *text(PREFIX), *typed, SUF, *text(SUFFIX),
                MID]  # fmt: skip
    assert ids == expected
    plain_fim = encode_fim(tokenizer, fim_tokens(tokenizer), PREFIX, SUFFIX)
    assert plain_fim == [PRE, *text(PREFIX), SUF, *text(SUFFIX), MID]
    spelled = encode_fim(tokenizer, fim_tokens(tokenizer), "<|fim_middle|>", "")
    assert MID not in spelled[1:-1]  # control-token text in the code stays text


def test_a_prompt_too_long_is_cut_to_llama_servers_budget(servers):
    tokenizer = servers["model"][0].engine.tokenizer
    prefix, suffix, extra = "ab" * 1000, "cd" * 1000, [("x.py", "ef" * 2000)]
    ids, cut = encode_infill(
        tokenizer, fim_tokens(tokenizer), prefix, suffix, extra, "", context=4096, max_tokens=8
    )
    # of llama-server's batch of 2048, 3/4 for the prefix's last tokens and the rest, less 2,
    # for the suffix's first; the extra context's last tokens fill the window but for 8 new
    before, after = encode_literally(tokenizer, prefix), encode_literally(tokenizer, suffix)
    middle = [PRE, *before[-1536:], SUF, *after[:510], MID]
    assert cut and ids[-len(middle) :] == middle and len(ids) == 4096 - 8
    context = extra_context(tokenizer, fim_tokens(tokenizer), extra)  # ends with <|file_sep|>
    assert ids[: -len(middle)] == context[len(middle) - len(ids) :]


@pytest.mark.parametrize("controls", CONTROLS)
@pytest.mark.parametrize("client", ["llama.vim", "llama.vscode"])
@pytest.mark.parametrize("drafter", ["model", "lookup"])
def test_infill_gives_target_only_tokens(servers, drafter, client, controls):
    worker, app = servers[drafter]
    temperature, seed = CONTROLS[controls]
    body = (LLAMA_VIM if client == "llama.vim" else LLAMA_VSCODE) | {"temperature": temperature}
    body |= {"seed": seed} if seed is not None else {}
    sampling = {"top_k": 40, "top_p": body["top_p"]}
    expected = target_only(worker, infill_ids(worker.engine, body), temperature, seed, **sampling)
    whole = post(app, "/infill", body | {"return_tokens": True, "response_fields": None})
    assert whole.status_code == 200, whole.text
    answer = whole.json()
    assert answer["tokens"] == expected and answer["tokens_predicted"] == N
    assert answer["stop"] is True and answer["stop_type"] == "limit"
    assert answer["usage"]["speculative"]["proposed"] > 0  # it drafted
    assert answer["generation_settings"]["samplers"][0] == ("greedy" if seed is None else
                                                            "temperature")  # fmt: skip
    every = {"return_tokens": True, "response_fields": None}
    streamed = events(post(app, "/infill", body | every | {"stream": True}))
    assert all(event["stop"] is False for event in streamed[:-1]) and streamed[-1]["stop"]
    assert [t for event in streamed[:-1] for t in event["tokens"]] == expected
    assert "".join(event["content"] for event in streamed) == answer["content"]
    if client == "llama.vim":  # the fields it names, as llama-server writes them
        named = post(app, "/infill", body).json()
        assert set(named) == set(LLAMA_VIM["response_fields"])
        assert named["content"] == answer["content"] and named["timings/predicted_n"] == N


@pytest.mark.parametrize("controls", CONTROLS)
def test_a_completion_with_a_suffix_gives_target_only_tokens(servers, controls):
    worker, app = servers["model"]
    temperature, seed = CONTROLS[controls]
    body = CONTINUE | {"temperature": temperature, "stop": []}
    body |= {"seed": seed} if seed is not None else {}
    tokenizer = worker.engine.tokenizer
    ids = encode_fim(tokenizer, fim_tokens(tokenizer), PREFIX, SUFFIX)
    expected = target_only(worker, ids, temperature, seed)
    whole = post(app, "/v1/completions", body | {"stream": False, "return_token_ids": True})
    assert whole.status_code == 200, whole.text
    choice = whole.json()["choices"][0]
    assert choice["token_ids"] == expected
    assert whole.json()["usage"]["prompt_tokens"] == len(ids)
    streamed = events(post(app, "/v1/completions", body | {"return_token_ids": True}))
    assert [t for event in streamed for t in event["choices"][0].get("token_ids", [])] == expected
    assert "".join(event["choices"][0]["text"] for event in streamed) == choice["text"]


def test_continues_request_as_it_sends_it(servers):
    app = servers["model"][1]
    streamed = post(app, "/v1/completions", CONTINUE)
    assert streamed.status_code == 200, streamed.text
    assert streamed.text.rstrip().endswith("data: [DONE]")
    assert events(streamed)[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_an_answer_that_ends_on_its_token_says_eos_unless_it_ignores_it(servers):
    app = servers["model"][1]
    ending = LLAMA_VSCODE | {"temperature": 0, "logit_bias": {str(EOS): 30}}  # ends at once
    answer = post(app, "/infill", ending).json()
    assert answer["stop_type"] == "eos" and answer["tokens_predicted"] < N
    past = post(app, "/infill", ending | {"ignore_eos": True}).json()
    assert past["stop_type"] == "limit" and past["tokens_predicted"] == N


def test_n_predict_0_reads_and_writes_nothing(servers):
    app = servers["model"][1]
    # llama.vscode's preparation request, which warms llama-server's cache
    body = LLAMA_VSCODE | {"n_predict": 0, "samplers": [], "t_max_predict_ms": 1}
    answer = post(app, "/infill", body).json()
    assert answer["content"] == "" and answer["tokens_predicted"] == 0 and answer["stop"]
    assert answer["tokens_evaluated"] > 0
    # the prompt was read into a slot's cache: the request it prepared reads only the rest
    later = post(app, "/infill", LLAMA_VSCODE | {"temperature": 0}).json()
    assert later["timings"]["prompt_n"] < later["tokens_evaluated"] // 2


def test_the_fields_the_editors_do_not_send_are_refused(servers):
    app = servers["model"][1]
    cases = {
        "repeat_penalty": (LLAMA_VSCODE | {"repeat_penalty": 1.1}, "unknown_field"),
        "samplers": (LLAMA_VSCODE | {"samplers": ["mirostat"]}, None),
        "input_extra.0.text": (LLAMA_VSCODE | {"input_extra": [{"filename": "a"}]}, None),
        "input_suffix": ({k: v for k, v in LLAMA_VSCODE.items() if k != "input_suffix"}, None),
        "n_predict": (LLAMA_VSCODE | {"n_predict": -2}, None),
        "suffix": (LLAMA_VSCODE | {"suffix": ""}, "unknown_field"),
    }
    for param, (body, code) in cases.items():
        error = post(app, "/infill", body)
        assert error.status_code == 400, (param, error.text)
        assert (error.json()["error"]["param"], error.json()["error"]["code"]) == (param, code)
    assert post(app, "/infill", LLAMA_VSCODE | {"model": "gpt-9"}).status_code == 404


def test_a_model_without_fim_tokens_is_refused(plain):
    error = post(plain, "/infill", LLAMA_VSCODE).json()["error"]
    assert (error["param"], error["code"]) == ("input_suffix", "fim_not_supported")
    text = {"model": MODEL, "prompt": "abc", "max_tokens": 4, "temperature": 0}
    error = post(plain, "/v1/completions", text | {"suffix": "cd"}).json()["error"]
    assert (error["param"], error["code"]) == ("suffix", "fim_not_supported")
    assert "no FIM tokens" in error["message"]
    same = [post(plain, "/v1/completions", text | extra).json() for extra in ({}, {"suffix": ""})]
    assert same[0]["choices"][0]["text"] == same[1]["choices"][0]["text"]  # plain, as before


def test_an_answer_cut_by_n_indent_is_the_target_only_answer_cut(servers):
    """A block the drafter copied may run past the cut; the answer ends where target-only
    decoding's text is cut, and holds the tokens up to the one that ended it."""
    worker, app = servers["lookup"]
    tokenizer = worker.engine.tokenizer
    body = LLAMA_VSCODE | {"n_predict": LIMIT, "temperature": 1.0, "top_k": None, "top_p": 1.0}
    ids = infill_ids(worker.engine, body, LIMIT)
    for seed in range(40):  # the first seed whose answer has a line after a line break
        expected = target_only(worker, ids, 1.0, seed, n=LIMIT)
        text = tokenizer.decode(expected)
        if (end := indent_end(text, 1)) is not None:
            break
    else:
        pytest.fail("no seed writes a second line")
    answer = post(app, "/infill", body | {"seed": seed, "n_indent": 1, "return_tokens": True})
    answer = answer.json()
    assert answer["content"] == text[:end] and answer["stop_type"] == "limit"
    assert answer["tokens"] == expected[: covering(tokenizer.decode, expected, end)]
    assert answer["tokens_predicted"] == len(answer["tokens"]) < LIMIT
