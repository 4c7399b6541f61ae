"""``spec-decode audit-engine``: audit a whole engine's speculative generation end to end
(:mod:`spec_decode.certify.engine_audit`): a built-in engine by name (``--list``), or any adapter
as ``module:factory``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

import typer

from spec_decode.certify.engines import ENGINES
from spec_decode.certify.isolation import UnusableCode, import_code
from spec_decode.cli.options import (
    AsJson,
    MinP,
    Temperature,
    TopK,
    TopP,
    console,
    print_json,
    progress,
    sampling_params,
)

#: The most generations one audit may draw (about an hour of the toy engines here).
MAX_SAMPLES = 10_000_000


def audit_engine_command(
    engine: Annotated[
        str | None,
        typer.Argument(help="A built-in engine (see --list) or an adapter as module:factory."),
    ] = None,
    samples: Annotated[int, typer.Option(min=2, max=MAX_SAMPLES, help="Generations.")] = 20_000,
    tokens: Annotated[int, typer.Option(min=1, max=8, help="Tokens compared per run.")] = 3,
    temperature: Temperature = 0.7,
    top_k: TopK = 3,
    top_p: TopP = 1.0,
    min_p: MinP = 0.0,
    false_alarm_rate: Annotated[
        float,
        typer.Option(min=1e-12, max=0.5, help="The test's chance of failing an exact engine."),
    ] = 1e-3,
    time_budget: Annotated[
        float | None, typer.Option(min=1.0, help="Stop drawing after this many seconds.")
    ] = None,
    list_engines: Annotated[
        bool, typer.Option("--list", help="Name the built-in engines.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Run an engine's speculative generation many times and test the joint distribution of its
    first tokens against its own target-only decoding (exit 1 on FAIL)."""
    if list_engines:
        for name in ENGINES:
            console.print(name)
        return
    if engine is None:
        raise typer.BadParameter("name an engine, or give --list", param_hint="ENGINE")
    sampling = sampling_params(temperature, top_k, top_p, min_p)
    adapter = _adapter(engine)
    from spec_decode.certify.engine_audit import audit_engine

    with progress(f"auditing {engine}", samples, enabled=not as_json) as advance:
        try:
            report = audit_engine(
                adapter, tokens=tokens, samples=samples, sampling=sampling,
                false_alarm_rate=false_alarm_rate, time_budget_s=time_budget, on_progress=advance,
            )  # fmt: skip
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--tokens") from error
        except (RuntimeError, OSError) as error:  # the engine broke off: a server died, say
            _broke(engine, "stopped", error)
    payload = {"engine": engine, **asdict(report)}
    if as_json:
        print_json(payload)
    else:
        _print(payload)
    if report.verdict != "PASS":
        raise typer.Exit(1)


def _adapter(name: str) -> Any:
    if name in ENGINES:
        try:
            return ENGINES[name]()
        except ValueError as error:  # a missing binary or model, named
            raise typer.BadParameter(str(error), param_hint="ENGINE") from error
        except (RuntimeError, OSError, ImportError) as error:  # its server died, or no extra
            _broke(name, "could not start", error)
    try:
        factory = import_code(name, "ENGINE")
    except UnusableCode as error:
        raise typer.BadParameter(str(error), param_hint="ENGINE") from error
    adapter = factory() if callable(factory) else factory
    missing = [a for a in ("vocab_size", "target_probs", "generate") if not hasattr(adapter, a)]
    if missing:
        raise typer.BadParameter(
            f"{name} gives an object without {', '.join(missing)}", param_hint="ENGINE"
        )
    return adapter


def _broke(name: str, what: str, error: Exception) -> None:
    """The engine ``name`` failed outside the audit's control: say so, exit 2, no traceback."""
    console.print(f"[red]error:[/] engine {name} {what}: {error}")
    raise typer.Exit(2)


def _print(payload: dict[str, Any]) -> None:
    low, high = payload["tv_interval"]
    colour = "green" if payload["verdict"] == "PASS" else "red"
    console.print(
        f"[{colour}]{payload['verdict']}[/] {payload['engine']}: {payload['samples']:,} runs of "
        f"{payload['tokens']} tokens, {payload['cells']:,} sequences; p = {payload['p_value']:.3g} "
        f"at a false-alarm rate of {payload['false_alarm_rate']:g}; detects TV >= "
        f"{payload['detectable_tv']:.4f} with probability 0.99; TV estimate "
        f"{payload['tv']:.4f} (95 % interval {low:.4f}-{high:.4f}; plug-in "
        f"{payload['plug_in_tv']:.4f}, an exact engine's below {payload['exact_tv_95']:.4f} at "
        f"this size); {payload['seconds']:.1f} s"
    )
    if payload["problem"]:
        console.print(f"  {payload['problem']}")
