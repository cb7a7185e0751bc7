"""A clock the test sets by hand, for code that takes `clock: Callable[[], float]`."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now
