"""Several requests sharing the server's calls, replayed on known greedy answers: what a call
plan would cost on the calibrated curve, without a model.

:func:`spec_decode.drafting.replay.replay_greedy` replays one request; here ``clients`` requests
run at once, in lockstep, as the server's slots run them on one unified cache: each step, every
decoding request plans (plain while another reads its prompt), the call feeds what
:func:`~spec_decode.backends.llamacpp.call_plan.plan_call` takes of their blocks and of the
shortest prompt left, and costs ``costs.target(rows)``, one pass. A request whose answer is done
leaves and the next waiting one joins; finished requests join the shared suffix history once no
request runs, as the server's ``IdleHistory`` holds them.
Greedy output does not depend on the plan, so each block emits its answer's next tokens as far
as the draft matches them, plus one.

Three ways to plan each step:

- ``target-only``: every request one row;
- ``planner``: the server's auto planners choosing together (:func:`joint_plan` over their
  offers, the same objective as the server's);
- ``hindsight``: the same offers, each option valued by the tokens it would truly emit, the
  same objective: the best those drafters could do beside each other, knowing the answers.

Where the server differs: its requests plan on their neighbours' last posted offers, not this
step's, and its calls come between threads, not in lockstep; time outside the calls is not
counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from spec_decode.backends.llamacpp.call_plan import plan_call
from spec_decode.core.checks import leading_matches
from spec_decode.core.trace import Step, Trace
from spec_decode.drafting.auto import AutoPlanner, auto_planner
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.shared_call import Offer, Option, SharedCall
from spec_decode.drafting.suffix import SuffixHistory

PLANS = ("target-only", "planner", "hindsight")
#: The server's rows a call (``slots.DEFAULT_BUDGET``) and a call of prompt alone (``MICRO_BATCH``).
BUDGET, PROMPT_CALL = 64, 512


@dataclass
class _Running:
    """One request in a slot: its prompt and answer, the prompt tokens read, its trace."""

    prompt: Sequence[int]
    answer: Sequence[int]
    planner: AutoPlanner
    read: int = 0
    trace: Trace = field(default_factory=Trace)

    @property
    def reading(self) -> bool:
        return self.read < len(self.prompt)

    @property
    def done(self) -> int:
        return len(self.trace.tokens)

    def offer(self) -> tuple[Offer, dict[str, list[int]]]:
        """This step's offer and the proposals behind it, as :meth:`AutoPlanner.plan` makes
        them (one option, a plain row, where nothing can be drafted)."""
        cap = min(self.planner.k_max, len(self.answer) - self.done - 1)
        if cap <= 0:
            return (Option(1, 1.0),), {}
        return self.planner.offer([*self.prompt, *self.trace.tokens], self.trace, cap)

    def truly(self, offer: Offer, proposals: dict[str, list[int]]) -> Offer:
        """``offer`` with every option worth the tokens its block would emit."""
        ahead = self.answer[self.done :]
        return tuple(
            Option(o.rows, 1.0 + leading_matches(proposals[o.drafter][: o.rows - 1], ahead))
            if o.drafter
            else Option(o.rows, 1.0)
            for o in offer
        )


@dataclass(frozen=True)
class Replay:
    """A replay's tokens, seconds on the curve, calls and rows drafted."""

    tokens: int
    seconds: float
    calls: int
    drafted: int

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def replay_shared(
    cases: Sequence[tuple[Sequence[int], Sequence[int]]],
    clients: int,
    costs: CostCurve,
    plan: str,
    k_max: int,
    vocab_size: int,
) -> Replay:
    """``cases`` (prompt ids, greedy answer ids), taken in order by ``clients`` slots, each
    step planned as ``plan`` says (one of :data:`PLANS`)."""
    if plan not in PLANS:
        raise ValueError(f"plan must be one of {PLANS}, got {plan!r}")
    history, waiting, running, held = SuffixHistory(), list(cases), [], []
    tokens = calls = drafted = 0
    seconds = 0.0
    while waiting or running:
        while waiting and len(running) < clients:
            prompt, answer = waiting.pop(0)
            planner = auto_planner(costs, vocab_size, None, k_max, history)
            running.append(_Running(prompt, answer, planner))
        decoding = [r for r in running if not r.reading]
        offers = [r.offer() for r in decoding]
        blocks = _blocks(decoding, offers, plan, reading=len(decoding) < len(running))
        posts = [(False, rows) for rows in blocks] + [
            (True, len(r.prompt) - r.read) for r in running if r.reading
        ]
        readers = [r for r in running if r.reading]
        fed = dict(plan_call(posts, BUDGET, PROMPT_CALL, all_posted=True))
        seconds += costs.target(sum(fed.values()))
        calls += 1
        for i, (r, (offer, proposals)) in enumerate(zip(decoding, offers, strict=True)):
            option = next(o for o in offer if o.rows == blocks[i])
            draft = proposals[option.drafter][: option.rows - 1] if option.drafter else []
            right = leading_matches(draft, r.answer[r.done :])
            r.trace.record(
                Step(list(r.answer[r.done : r.done + right + 1]), len(draft), right,
                     drafter=option.drafter if draft else "", proposals=proposals)
            )  # fmt: skip
            tokens += right + 1
            drafted += len(draft)
        for j, r in enumerate(readers):
            r.read += fed.get(len(decoding) + j, 0)
            if not r.reading:  # the prompt's last row scores the first token
                r.trace.record(Step([r.answer[0]]))
                tokens += 1
        held += [[*r.prompt, *r.answer] for r in running if r.done >= len(r.answer)]
        running = [r for r in running if r.done < len(r.answer)]
        if not running:
            for sequence in held:
                history.add(sequence)
            held.clear()
    return Replay(tokens, seconds, calls, drafted)


def _blocks(
    decoding: list[_Running],
    offers: list[tuple[Offer, dict[str, list[int]]]],
    plan: str,
    reading: bool,
) -> list[int]:
    """Each decoding request's rows this step: one where target-only, else the option its
    planner chooses (:meth:`AutoPlanner.choose`) among everyone's offers, this step's, in one
    call on a unified cache (valued truly in hindsight)."""
    if plan == "target-only":
        return [1] * len(decoding)
    chosen = tuple(offer for offer, _ in offers)
    if plan == "hindsight":
        chosen = tuple(r.truly(o, p) for r, (o, p) in zip(decoding, offers, strict=True))
    return [
        r.planner.choose(chosen[i], SharedCall(chosen, i, reading, BUDGET, (), one_pass=True)).rows
        for i, r in enumerate(decoding)
    ]
