"""The serving benchmark's client side: the server variants and their command lines, one streamed
turn timed on the client, one session (every turn re-sending the conversation), and the chat
template check."""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai

from bench.lib.prompt_sets import Session
from bench.lib.servers import Server
from spec_decode.backends.prompts import render_chat_template

WORKLOADS = ("code-edit", "mtbench", "humaneval")
BASELINE = "llama-server target-only"
NGRAM = "llama-server ngram-simple"


@dataclass(frozen=True)
class Variant:
    """One server configuration: its engine, extra command-line arguments, extra request fields
    and the variant whose output it must reproduce (its own target-only)."""

    name: str
    engine: str
    args: tuple[str, ...] = ()
    request: dict[str, object] = field(default_factory=dict)
    reference: str = BASELINE


def server_command(
    variant: Variant,
    *,
    target: Path,
    port: int,
    threads: int,
    ctx: int,
    llama_server: str | None,
    ours_command: str,
) -> list[str]:
    """The command line that starts ``variant`` on ``port``: llama-server on the ``target``
    GGUF with one slot, or ours (``ours_command``), each with its variant's arguments."""
    if variant.engine == "llama-server":
        return [
            str(llama_server),
            *("-m", str(target), "-t", str(threads), "-c", str(ctx)),
            *("--host", "127.0.0.1", "--port", str(port), "-np", "1", "--no-webui"),
            *variant.args,
        ]
    return [
        *shlex.split(ours_command),
        *("--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)),
        *variant.args,
    ]


def case_name(session: Session) -> str:
    return f"{session.category} {session.source_id}"


def round_robin(sessions: list[Session]) -> list[str]:
    """Case names alternating between workloads (first of each, second of each, ...), so a
    run cut short by its budget still covers every workload."""
    by_workload = [[case_name(s) for s in sessions if s.category == w] for w in WORKLOADS]
    longest = max(len(cases) for cases in by_workload)
    return [cases[i] for i in range(longest) for cases in by_workload if i < len(cases)]


def run_turn(
    client: openai.OpenAI,
    model: str,
    variant: Variant,
    request: dict[str, object],
    tokens: int,
) -> dict[str, object]:
    """One streamed request, timed on the client: ``request`` holds chat ``messages`` or a raw
    ``prompt``."""
    chat = "messages" in request
    common = {
        "model": model,
        "max_tokens": tokens,
        "temperature": 0.0,
        "seed": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": dict(variant.request),
    }
    start = time.perf_counter()
    create = client.chat.completions.create if chat else client.completions.create
    stream = create(**request, **common)
    text, first, last, usage, timings, finish = "", None, None, {}, None, None
    for chunk in stream:
        for choice in chunk.choices:
            piece = choice.delta.content if chat else choice.text
            if piece:
                last = time.perf_counter()
                first = first or last
                text += piece
            finish = choice.finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        timings = (chunk.model_extra or {}).get("timings") or timings
    end = time.perf_counter()
    completion = usage.get("completion_tokens") or 0
    speculative = usage.get("speculative") or {}
    drafted = timings.get("draft_n") if timings else speculative.get("proposed")
    accepted = timings.get("draft_n_accepted") if timings else speculative.get("accepted")
    if variant.engine == "llama-server":
        # each pass emits its accepted drafts plus one token (the prompt's pass the first
        # token): derived, llama-server does not report passes
        passes = completion - (accepted or 0) if completion else None
    else:
        passes = speculative.get("target_passes")
    return {
        "text": text,
        "finish_reason": finish,
        "seconds": end - start,
        "ttft_s": None if first is None else first - start,
        "generation_s": None if first is None else last - first,
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
        "completion_tokens": completion,
        "drafted": drafted or 0,
        "accepted": accepted or 0,
        "target_passes": passes,
        "server_timings": timings,
        "speculative": speculative or None,
    }


def run_session(
    server: Server, variant: Variant, session: Session, tokens: int
) -> dict[str, object]:
    """Every turn of ``session``, each re-sending the conversation so far (the variant's own
    answers included); a raw (``humaneval``) session is one completion request."""
    client, model = server.client()
    turns, messages = [], []
    start = time.perf_counter()
    for user in session.turns:
        if session.category == "humaneval":
            turns.append(run_turn(client, model, variant, {"prompt": user}, tokens))
            continue
        messages.append({"role": "user", "content": user})
        turn = run_turn(client, model, variant, {"messages": list(messages)}, tokens)
        messages.append({"role": "assistant", "content": turn["text"]})
        turns.append(turn)
    seconds = time.perf_counter() - start
    completion = sum(t["completion_tokens"] for t in turns)
    load = os.getloadavg()[0]
    return {"generated": completion, "seconds": seconds, "load_average": load, "turns": turns}


def template_check(server: Server, sessions: list[Session]) -> dict[str, bool]:
    """Per chat session: whether llama-server's ``/apply-template`` renders its first turn as
    ours does (the GGUF's template through :func:`render_chat_template`)."""
    template = httpx.get(f"{server.base}/props", timeout=30).json()["chat_template"]
    result = {}
    for session in sessions:
        if session.category == "humaneval":
            continue
        messages = [{"role": "user", "content": session.turns[0]}]
        theirs = httpx.post(
            f"{server.base}/apply-template", json={"messages": messages}, timeout=30
        ).json()["prompt"]
        result[case_name(session)] = theirs == render_chat_template(template, messages)
    return result
