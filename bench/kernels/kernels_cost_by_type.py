"""A 16-token block's cost on the exact-rows build against llama-server's default build, by weight
type: ``kernels_compare.py`` (one-token passes and 16-token blocks, builds interleaved) on each
requantized target, gathered into one file for ``exact_rows_by_type.py --costs``.

    python bench/kernels/kernels_cost_by_type.py --default LLAMA_SERVER_BUILD/bin \\
        --models /tmp/lq/models --out bench/results/kernels_cost_by_type.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.exact_rows_report import TYPES
from bench.lib.machine import machine

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--default", required=True, help="the default build's library folder")
    parser.add_argument("--models", type=Path, default=Path("/tmp/lq/models"))
    parser.add_argument("--types", default=TYPES, help=f"comma-separated (default {TYPES})")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from spec_decode.backends.llamacpp.build import lib_dir

    patched = str(lib_dir())
    results = json.loads(args.out.read_text()) if args.out.exists() else {"types": {}}
    results["command"] = (
        f"python bench/kernels/kernels_compare.py --model {args.models}/target-TYPE.gguf "
        f"--build patched={patched} --build default=LLAMA_SERVER_BUILD/bin --blocks 1,16 "
        "--rounds N (each type's N under its rounds_asked)"
    )
    results["machine"] = {**machine(), "default": f"llama-server's default build: {args.default}"}
    for kind in args.types.split(","):
        model = args.models / f"target-{kind}.gguf"
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [sys.executable, str(HERE / "kernels_compare.py"), "--model", str(model)]
            command += ["--build", f"patched={patched}", "--build", f"default={args.default}"]
            command += ["--blocks", "1,16", "--rounds", str(args.rounds), "--out", out.name]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            entry = json.loads(Path(out.name).read_text())
        ms = {label: {b: v["ms"] for b, v in s.items()} for label, s in entry["summary"].items()}
        entry["rounds_asked"] = args.rounds
        entry["ratio_16"] = ms["patched"]["16"] / ms["default"]["16"]
        entry["ratio_1"] = ms["patched"]["1"] / ms["default"]["1"]
        print(f"{kind}: 16 tokens {entry['ratio_16']:.2f}x, one token {entry['ratio_1']:.2f}x")
        results["types"][kind] = entry
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
