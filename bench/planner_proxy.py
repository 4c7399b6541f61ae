"""A deterministic proxy for auto's choices: greedy decoding in process on public prompts, and the
emitted tokens per calibrated one-token pass, sum over steps of cost(drafted + 1) / cost(1).

Wall-clock runs through the server take minutes and move by ~10% between repetitions on a
shared 2-core machine; greedy output and the planner's choices do not move at all, and the
calibrated curve prices each choice. So this compares acceptance estimates and cost curves in
about a minute, before the servers confirm on the clock (``bench/serve.py``). Prompts go in as
the server sends them: completions raw, chat through the template; one engine with the shared
history, prompts in order, as one server would see them.

    python bench/planner_proxy.py --humaneval 3 --code-edit 4 --mtbench 3
"""

from __future__ import annotations

import argparse

import prompt_sets

from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.engine import Engine, EngineConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--humaneval", type=int, default=3)
    ap.add_argument("--code-edit", type=int, default=4)
    ap.add_argument("--mtbench", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    engine = Engine.load(EngineConfig(threads=args.threads))
    costs = engine.costs
    sets = {"humaneval": args.humaneval, "code_edit": args.code_edit, "mtbench": args.mtbench}
    for name, count in sets.items():
        tokens = units = drafted = accepted = 0
        for prompt in getattr(prompt_sets, name)(count, args.seed):
            if prompt.chat:
                ids = engine.encode_chat([{"role": "user", "content": prompt.text}])
            else:
                ids = engine.encode(prompt.text, raw=True)
            trace = engine.generate(ids, args.tokens, sampling=SamplingParams(temperature=0)).trace
            tokens += len(trace.tokens)
            units += sum(costs.relative(d + 1) for d in trace.drafted_lengths)
            drafted += trace.proposed
            accepted += trace.accepted
        print(
            f"{name:10s} {count} prompts: {tokens} tokens in {units:.1f} one-token passes "
            f"({tokens / units:.3f} a pass; drafted {drafted}, accepted {accepted})"
        )


if __name__ == "__main__":
    main()
