"""Per-seed identity on a GPU: the transformers backend speculating under the coupled rule, in
bf16 on CUDA, against its own target-only decoding, seed by seed.

A GPU's batched kernels score a block's rows in other bits than one-token passes (bf16 makes the
gap large), so a drafted block can tilt a noisy choice that target-only decoding makes the other
way. The transformers backend re-scores a row whose choice could flip within its stated rounding
tolerance; this checks that it suffices where the gap is largest, on random models (near-uniform
rows: near ties everywhere), with no weights to download: a target and a draft that is the target
with its weights perturbed, each saved with a word tokenizer over ``--vocab`` words.

    python bench/exactness/gpu_exactness.py --device cuda --seeds 100 \\
        [--out bench/results/gpu_exactness]

Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.results import RESULTS

#: Prompt length in tokens (ids chosen by seed).
WORDS_PER_PROMPT = 12


def save_pair(
    folder: Path, vocab: int, layers: int, hidden: int, noise: float
) -> tuple[Path, Path]:
    """A random Qwen2 target and its perturbed copy as a draft, each with a word tokenizer."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    words = ["<unk>", "</s>", *(f"w{i}" for i in range(vocab - 2))]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="</s>")
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
        num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
        max_position_embeddings=512, tie_word_embeddings=False, eos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    target = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(4.0)  # peaked enough to draft, flat enough for near ties
    draft = Qwen2ForCausalLM(config).eval()
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        for weight in draft.parameters():
            weight.add_(noise * weight.std() * torch.randn_like(weight))
    paths = []
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(folder / name)
        fast.save_pretrained(folder / name)
        paths.append(folder / name)
    return paths[0], paths[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--weights", default="bf16")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--noise", type=float, default=0.3)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperatures", default="0,0.7,1.0")
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu_exactness")
    args = ap.parse_args()

    from spec_decode.core.sampling import SamplingParams
    from spec_decode.serving.config import EngineConfig
    from spec_decode.serving.engine import Engine
    from spec_decode.serving.request import RequestOptions

    folder = Path(tempfile.mkdtemp(prefix="gpu-exactness-"))
    target, draft = save_pair(folder, args.vocab, args.layers, args.hidden, args.noise)
    engine = Engine.load(EngineConfig(
        target=str(target), draft=str(draft), backend="transformers", device=args.device,
        target_weights=args.weights, draft_weights=args.weights, policy="fixed", k=args.k,
    ))  # fmt: skip
    rows = []
    cases = [("coupled", float(t)) for t in args.temperatures.split(",")]
    cases.append(("standard", 0.7))  # the control: per-seed identity is not its promise
    for rule, temperature in cases:
        same = drafted = accepted = passes = tokens = 0
        start = time.perf_counter()
        for seed in range(args.seeds):
            prompt = [2 + (seed * 7 + 3 * i) % (args.vocab - 2) for i in range(WORDS_PER_PROMPT)]
            options = RequestOptions(SamplingParams(temperature), seed, rule=rule)
            request = engine.prepare(prompt, options, max_tokens=args.tokens)
            answers = [engine.generate(run) for run in (request, request.target_only())]
            speculative, reference = answers
            same += speculative.tokens == reference.tokens
            drafted += speculative.trace.proposed
            accepted += speculative.trace.accepted
            passes += speculative.trace.target_passes
            tokens += len(speculative.tokens)
        rows.append({
            "rule": rule, "temperature": temperature, "seeds": args.seeds, "identical": same,
            "drafted": drafted, "accepted": accepted, "tokens_per_pass": tokens / passes,
            "seconds": time.perf_counter() - start,
        })  # fmt: skip
        print(rows[-1], flush=True)
    import torch

    where = machine() | ({"gpu": torch.cuda.get_device_name()} if args.device == "cuda" else {})
    results = {"machine": where, "args": {k: str(v) for k, v in vars(args).items()},
               "rows": rows, "created": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# Per-seed identity on {args.device} ({args.weights}), k = {args.k}",
        "",
        f"Random Qwen2 target ({args.layers} layers, width {args.hidden}, vocabulary "
        f"{args.vocab}) and its perturbed copy as the draft; {args.tokens} tokens a seed.",
        "",
        "| rule | temperature | seeds | identical to target-only | acceptance | tokens / pass |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        acceptance = r["accepted"] / max(r["drafted"], 1)
        lines.append(f"| {r['rule']} | {r['temperature']} | {r['seeds']} | {r['identical']} | "
                     f"{acceptance:.2f} | {r['tokens_per_pass']:.2f} |")  # fmt: skip
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
