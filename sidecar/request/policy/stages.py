"""Marks of the admission stages a request passed, with their times, for the trace of
its decision: the director marks each stage as it ends; a trace turns the marks into
events. Nothing is kept when no trace records them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

Mark = tuple[str, int]  # the stage, and when it ended (ns since the epoch)

_marks: ContextVar[list[Mark] | None] = ContextVar("qos_stage_marks", default=None)


def staged(stage: str, value: T) -> T:
    """`value`, the stage's result, once the stage is marked as ended."""
    marks = _marks.get()
    if marks is not None:
        marks.append((stage, time.time_ns()))
    return value


@contextlib.contextmanager
def recording() -> Iterator[list[Mark]]:
    """The marks made within the block (by this task and those it awaits)."""
    marks: list[Mark] = []
    token = _marks.set(marks)
    try:
        yield marks
    finally:
        _marks.reset(token)
