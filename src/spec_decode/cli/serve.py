"""``spec-decode serve``: the engine behind an OpenAI-compatible HTTP API (``[serve]`` extra).

FastAPI, uvicorn and the engine are imported when the command runs, so the rest of the CLI
starts without the extra. The model is loaded (and the machine calibrated, the first time)
before the port opens; SIGTERM or Ctrl-C stops taking requests, drops the queued ones, lets the
running generation finish within ``--grace`` seconds (cancelling it then) and exits 0.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET, PREPARED
from spec_decode.cli import engine_options, preflight
from spec_decode.cli.options import EngineK, Threads, print_load_notes
from spec_decode.cli.rule_option import DEFAULT_RULE, RuleOption

console = Console(stderr=True)
#: Slots by default: on 2 cores a batch buys the first token, not throughput, and 4 slots keep
#: 4 x 4,096 positions of KV cache (about 0.5 GB for the packaged target).
DEFAULT_PARALLEL, MAX_PARALLEL = 4, 64
#: What the server imports from the ``[serve]`` extra, checked before anything else.
SERVE_MODULES = ("fastapi", "uvicorn", "sse_starlette", "prometheus_client", "pydantic")


def serve_command(
    context: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free one).")] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="SPEC_DECODE_API_KEY",
            help="Require 'Authorization: Bearer KEY' on every /v1 route.",
            show_envvar=True,
        ),
    ] = None,
    target: engine_options.Target = DEFAULT_TARGET,
    draft: engine_options.Draft = DEFAULT_DRAFT,
    backend: engine_options.Backend = "auto",
    threads: Threads = None,
    k: EngineK = None,
    policy: engine_options.Policy = "auto",
    confidence: engine_options.Confidence = 0.0,
    tree: engine_options.Tree = None,
    rule: RuleOption = DEFAULT_RULE,
    target_weights: engine_options.TargetWeights = "fp16",
    draft_weights: engine_options.DraftWeights = "int8",
    device: engine_options.Device = "cpu",
    no_build: engine_options.NoBuild = False,
    parallel: Annotated[
        int,
        typer.Option(
            min=1,
            max=MAX_PARALLEL,
            help=f"Requests generated at once, each on a slot with its own KV cache (default "
            f"{DEFAULT_PARALLEL}: a slot costs about 30 KB a token of context for the packaged "
            "target); one where shared calls would not be exact.",
        ),
    ] = DEFAULT_PARALLEL,
    max_queue: Annotated[
        int, typer.Option(min=0, help="Requests that may wait for a slot (429 after).")
    ] = 16,
    max_tokens: Annotated[
        int, typer.Option(min=1, help="The most tokens one request may ask for (more: a 400).")
    ] = 1024,
    timeout: Annotated[
        float, typer.Option(min=0.001, help="The most seconds one generation may run.")
    ] = 300.0,
    grace: Annotated[
        float, typer.Option(min=0.0, help="Seconds a running generation gets at shutdown.")
    ] = 10.0,
    shared_history: Annotated[
        bool, typer.Option(help="Let the suffix drafter continue from earlier requests.")
    ] = True,
    name: Annotated[
        str | None, typer.Option(help="The model id served (default: the target's name).")
    ] = None,
) -> None:
    """Serve exact speculative decoding behind an OpenAI-compatible API (chat and completions,
    streamed or not), several generations at once, each its solo answer, with a bounded
    queue."""
    try:
        config = engine_options.engine_config(
            context, target=target, draft=draft, backend=backend, policy=policy, k=k, tree=tree,
            confidence=confidence, rule=rule, target_weights=target_weights,
            draft_weights=draft_weights, threads=threads, device=device,
            shared_history=shared_history, parallel=parallel,
        )  # fmt: skip
        listener = _ready(config, host, port, no_build)
    except (ValueError, FileNotFoundError) as error:
        preflight.fail(error)
    worker = _start_worker(config, max_queue, timeout)
    model_name = name or (target if target in PREPARED else Path(target).stem)
    from spec_decode.serving.server import create_app
    from spec_decode.serving.state import Settings

    settings = Settings(model_name, api_key or None, max_tokens, grace_s=grace)
    app = create_app(worker, settings)

    _run_until_stopped(app, worker, listener, grace=grace, model_name=model_name)
    loaded = "draft loaded" if worker.engine.draft else "draft not loaded"
    console.print(f"stopped ({loaded}; {worker.engine.history.version} requests in the history)")


def _start_worker(config: Any, max_queue: int, timeout: float) -> Any:
    """The worker with the engine loaded on its thread (saying when it runs fewer requests at
    once than ``--parallel`` asks, and why); exit 2 for a model or combination refused."""
    try:
        from spec_decode.serving.engine import Engine
        from spec_decode.serving.slots import batching_refusal
        from spec_decode.serving.worker import Worker
    except ImportError as error:
        preflight.fail(f"{error}; install the [serve] extra: {preflight.install_hint('serve')}")

    def load() -> Engine:  # on the worker's thread, as every later llama.cpp call
        engine = Engine.load(config)
        print_load_notes(engine)
        if engine.n_slots < config.parallel:
            why = batching_refusal(engine.target) or "this backend or --tree runs one"
            console.print(f"[yellow]note:[/] {why}")
        engine.warm_up()
        return engine

    try:
        return Worker(load, max_queue, timeout)
    except (ValueError, FileNotFoundError) as error:
        preflight.fail(error)


def _ready(config: Any, host: str, port: int, no_build: bool) -> socket.socket:
    """Everything checked before a model loads: the ``[serve]`` extra, the models and the
    backend's extra (:func:`~spec_decode.cli.preflight.check_engine`), the address (bound now:
    a port in use is refused at once), then the llama.cpp kernels, built if missing."""
    preflight.require("serve", SERVE_MODULES, "serve")
    chosen = preflight.check_engine(config)
    listener = preflight.bind(host, port)
    if chosen == "llama.cpp":
        preflight.ensure_kernels(no_build)
    return listener


def _run_until_stopped(
    app: Any, worker: Any, listener: socket.socket, *, grace: float, model_name: str
) -> None:
    """Serve ``app`` with uvicorn on the bound ``listener`` until SIGTERM or Ctrl-C, then give the
    running generation ``grace`` seconds (:meth:`~spec_decode.serving.worker.Worker.close`) and
    wait for the worker."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            worker.close(grace)
            super().handle_exit(sig, frame)

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            for server in self.servers:
                for sock in server.sockets:
                    bound_host, bound_port = sock.getsockname()[:2]
                    console.print(
                        f"serving {model_name} on http://{bound_host}:{bound_port}/v1 "
                        f"({worker.slots} at once)"
                    )

    server = Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=grace + 5))
    for sig in (signal.SIGTERM, signal.SIGINT):  # uvicorn re-raises the signal it stopped on
        signal.signal(sig, lambda *_: None)  # after shutdown: let it land here, then exit 0
    server.run(sockets=[listener])
    worker.join()
