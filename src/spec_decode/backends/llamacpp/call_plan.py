"""What one shared call of the server's slots feeds of the rows they posted
(:class:`~.slots.Batcher`; the module docstring there says why in this order)."""

from __future__ import annotations

from collections.abc import Sequence


def plan_call(
    waiting: Sequence[tuple[bool, int]], budget: int, prompt_call: int, all_posted: bool
) -> list[tuple[int, int]]:
    """What one call feeds of the posts ``waiting`` (each: whether it is a prompt, its rows
    left): ``(index, rows)`` pairs. Blocks first, shortest first (one row each while a prompt
    waits), then one prompt, the shortest, in what ``budget`` rows leave; while only prompts
    wait and ``all_posted`` (every running request posted: none is about to decode), the
    shortest prompt alone, up to ``prompt_call`` rows."""
    prompts = sum(is_prompt for is_prompt, _ in waiting)
    room = prompt_call if all_posted and prompts == len(waiting) else budget
    plan: list[tuple[int, int]] = []
    for index in sorted(range(len(waiting)), key=waiting.__getitem__):
        is_prompt, left = waiting[index]
        take = min(left, room, left if is_prompt or not prompts else 1)
        if take <= 0:
            break
        plan.append((index, take))
        room -= take
        if is_prompt:
            break
    return plan
