"""``spec-decode serve`` as a subprocess on 127.0.0.1 with the tiny GGUF pair, driven by the
official ``openai`` client and by raw HTTP (httpx) for what a client library would not send."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")
pytest.importorskip("prometheus_client")

from conftest import EOS  # noqa: E402
from servers import MODEL, Server  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from spec_decode.cli.app import app  # noqa: E402


@pytest.fixture(scope="module")
def server(tiny_pair):
    running = Server(tiny_pair, "--max-queue", "32")
    yield running
    assert running.stop() == 0, "".join(running.lines)


def chat(client: openai.OpenAI, content: str, **options) -> tuple[list[int], str, dict]:
    """Token ids, text and usage of one chat completion (streamed when ``stream=True``)."""
    messages = [{"role": "user", "content": content}]
    extra = {"return_token_ids": True, **options.pop("extra_body", {})}
    if not options.pop("stream", False):
        response = client.chat.completions.create(
            model=MODEL, messages=messages, extra_body=extra, **options
        )
        choice = response.choices[0]
        return choice.model_extra["token_ids"], choice.message.content, response.usage.model_dump()
    tokens, text, usage = [], "", {}
    for chunk in client.chat.completions.create(
        model=MODEL, messages=messages, stream=True, extra_body=extra, **options
    ):
        if chunk.choices:
            tokens += chunk.choices[0].model_extra.get("token_ids") or []
            text += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
    return tokens, text, usage


def test_models_health_and_metrics(server):
    assert [m.id for m in server.client().models.list().data] == [MODEL]
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    from prometheus_client.parser import text_string_to_metric_families

    server.client().completions.create(model=MODEL, prompt="abc", max_tokens=4)
    families = {
        f.name: f for f in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text)
    }
    assert "spec_decode_requests" in families and "spec_decode_tokens" in families
    generated = [
        s for s in families["spec_decode_tokens"].samples if s.labels["kind"] == "generated"
    ]
    assert generated and generated[0].value >= 4


def test_chat_streamed_equals_chat_whole_with_usage(server):
    client = server.client()
    whole = chat(client, "hello there", max_tokens=40, temperature=0)
    streamed = chat(client, "hello there", max_tokens=40, temperature=0, stream=True)
    assert streamed[:2] == whole[:2] and len(whole[0]) == 40
    for usage in (whole[2], streamed[2]):
        assert usage["completion_tokens"] == 40 and usage["prompt_tokens"] > 0
        spec = usage["speculative"]
        assert set(spec) >= {"target_passes", "proposed", "accepted", "acceptance_rate"}
        assert set(spec) >= {"tokens_per_pass", "steps_by_drafter"}
        assert sum(spec["steps_by_drafter"].values()) == spec["target_passes"] <= 40


def test_completions_streamed_and_whole_with_stop(server):
    client = server.client()
    whole = client.completions.create(model=MODEL, prompt="abcabc", max_tokens=30, temperature=0)
    text = whole.choices[0].text
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 30
    timings = whole.model_extra["engine_timings"]
    assert 0 < timings["first_step_ms"] <= timings["generation_ms"] and timings["queued_ms"] >= 0
    pieces = client.completions.create(
        model=MODEL, prompt="abcabc", max_tokens=30, temperature=0, stream=True
    )
    assert "".join(p.choices[0].text for p in pieces if p.choices) == text
    stop = text[4:6]
    cut = client.completions.create(
        model=MODEL, prompt="abcabc", max_tokens=30, temperature=0, stop=[stop]
    )
    assert (
        cut.choices[0].finish_reason == "stop" and cut.choices[0].text == text[: text.index(stop)]
    )


def test_ignore_eos_writes_to_the_token_limit(server):
    client = server.client()
    ending = {"logit_bias": {str(EOS): 8}}  # the tiny model ends only when pushed to
    ask = {"model": MODEL, "prompt": "xyz", "max_tokens": 30, "temperature": 0}
    ended = client.completions.create(**ask, extra_body=ending).choices[0]
    past = client.completions.create(**ask, extra_body={**ending, "ignore_eos": True}).choices[0]
    assert ended.finish_reason == "stop" and past.finish_reason == "length"
    assert past.text.startswith(ended.text)


def test_greedy_output_equals_generate_no_draft(server, tiny_pair):
    target, _ = tiny_pair
    result = CliRunner().invoke(
        app,
        ["generate", "--target", str(target), "--no-draft",
         "--prompt", "write some letters", "--max-new-tokens", "48", "--json", "--threads", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    expected = json.loads(result.stdout)["runs"]["target-only"]["token_ids"]
    tokens, _, _ = chat(server.client(), "write some letters", max_tokens=48, temperature=0)
    assert tokens == expected


#: Requests that share long prefixes, so that a warm cache is reused under load as well.
PROMPTS = [f"the quick brown fox jumps over the lazy dog {tail}" for tail in ("a", "bb", "abc")]
SAMPLED = {"temperature": 0.9, "top_p": 0.95, "extra_body": {"top_k": 20}}


def kinds() -> list[tuple[str, dict]]:
    greedy = [(p, {"temperature": 0}) for p in PROMPTS]
    seeded = [(p, {**SAMPLED, "seed": seed}) for seed, p in enumerate(PROMPTS)]
    return greedy + seeded + [(PROMPTS[0], {**SAMPLED, "seed": 7})]


@pytest.mark.slow
def test_eight_concurrent_clients_get_what_each_request_gets_alone(server):
    client = server.client()
    requests = kinds()
    alone = [chat(client, prompt, max_tokens=32, **dict(opts))[:2] for prompt, opts in requests]
    failures: list[str] = []

    def one_client(index: int) -> list[tuple[int, tuple[list[int], str]]]:
        own = server.client()
        order = random.Random(index).sample(range(len(requests)), 4)
        results = []
        for n, which in enumerate(order):
            prompt, opts = requests[which]
            try:
                got = chat(own, prompt, max_tokens=32, stream=(index + n) % 2 == 1, **dict(opts))
                results.append((which, got[:2]))
            except openai.APIError as error:
                failures.append(f"client {index}: {error}")
        return results

    with ThreadPoolExecutor(8) as pool:
        answers = [r for rs in pool.map(one_client, range(8)) for r in rs]
    assert failures == [] and len(answers) == 8 * 4
    assert all(got == alone[which] for which, got in answers)


def test_a_disconnected_stream_is_cancelled_and_the_next_request_is_unaffected(server):
    client = server.client()
    reference = chat(client, "tell me a long story", max_tokens=30, temperature=0)[:2]
    body = {"model": MODEL, "prompt": "zzz", "max_tokens": 480, "stream": True, "temperature": 0}

    def cancelled() -> float:
        text = httpx.get(f"{server.url}/metrics").text
        found = re.search(r'spec_decode_generations_total\{reason="cancelled"\} (\S+)', text)
        return float(found.group(1)) if found else 0.0

    before = cancelled()
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
    deadline = time.monotonic() + 30  # generous: the check is that it ends, not how fast
    while cancelled() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cancelled() == before + 1
    assert chat(client, "tell me a long story", max_tokens=30, temperature=0)[:2] == reference


def post(server: Server, path: str, content: bytes | str, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", content=content, headers=headers, timeout=30)


def test_the_official_client_sees_a_refusal_as_its_bad_request_error(server):
    """Each refusal's status, param and code is checked in process (test_refusals.py); here the
    official client, over real HTTP, raises its own error type for one."""
    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError, match="n = 1"):
        server.client().chat.completions.create(model=MODEL, messages=user, n=3)
    assert httpx.get(f"{server.url}/v1/nowhere").status_code == 404


@pytest.mark.slow
def test_api_key_and_sigterm_during_a_stream(tiny_pair):
    secured = Server(tiny_pair, env={"SPEC_DECODE_API_KEY": "s3cret"})
    try:
        with pytest.raises(openai.AuthenticationError):
            secured.client("wrong").models.list()
        assert post(secured, "/v1/completions", "{}").status_code == 401
        assert httpx.get(f"{secured.url}/health").status_code == 200  # not a /v1 route
        client = secured.client("s3cret")
        assert client.completions.create(model=MODEL, prompt="ab", max_tokens=3).choices
        stream = client.completions.create(model=MODEL, prompt="ab", max_tokens=480, stream=True)
        next(iter(stream))
        secured.process.send_signal(signal.SIGTERM)
        for _ in stream:  # ends: finished or cancelled, not hung
            pass
        assert secured.process.wait(30) == 0
    finally:
        if secured.process.poll() is None:
            secured.process.kill()


def test_serve_refuses_a_missing_model_with_exit_2(tmp_path):
    result = CliRunner().invoke(app, ["serve", "--target", str(tmp_path / "nope.gguf")])
    assert result.exit_code == 2 and "nope.gguf" in result.output


def test_shutdown_after_tool_calls_frees_the_models_before_the_interpreter_exits(
    json_pair, tmp_path
):
    """The app is a reference cycle that holds the engine: unless something frees the models
    before, the garbage collector does, and when no collection ran before exit that is during
    the interpreter's teardown, where llama.cpp's bindings could no longer be imported
    ("Exception ignored in LlamaCppModel.__del__ ... sys.meta_path is None"). The server's
    collector is turned off here, so that teardown is where it would happen. (Both the server,
    which closes the engine at shutdown, and the model, which binds its free functions at load,
    now keep this from happening.)"""
    (tmp_path / "sitecustomize.py").write_text("import gc\ngc.disable()\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    served = Server(json_pair, env={"PYTHONPATH": path})
    try:
        tool = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
        served.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=[tool],
            tool_choice="required", max_tokens=20, temperature=0,
        )  # fmt: skip
    finally:
        assert served.stop() == 0
    log = "".join(served.lines)
    assert "stopped" in log and "Exception ignored" not in log and "Traceback" not in log, log
