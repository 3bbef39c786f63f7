"""`Plan`: one run of an operation written once as a generator of the I/O it needs.

An operation that sync and async code share yields a request for each piece of
I/O and is sent the reply (or thrown the error); its two drivers differ only in
the lines that do the I/O. `Plan` is the loop both drivers would otherwise spell
out: iterating it yields the requests, the driver answers each by setting
``reply`` (or calling `fail`), and ``value`` is what the operation returned.

Example:
    >>> def doubled():
    ...     x = yield "read"
    ...     return 2 * x
    >>> plan = Plan(doubled())
    >>> for request in plan:
    ...     plan.reply = 21
    >>> plan.value
    42
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Plan"]

Op = TypeVar("Op")
R = TypeVar("R")


class Plan(Generic[Op, R]):
    """Drives ``steps``: each request it yields comes out of the iteration; what
    ``reply`` holds when the next one is asked for (None unless set) is sent
    back, or the error given to `fail` is thrown in. Once the steps return,
    the iteration ends and ``value`` holds what they returned."""

    __slots__ = ("_error", "_steps", "reply", "value")

    def __init__(self, steps: Generator[Op, Any, R]) -> None:
        self._steps = steps
        self._error: BaseException | None = None
        self.reply: Any = None
        self.value: R

    def fail(self, error: BaseException) -> None:
        """Throw ``error`` into the steps, where the last request was made."""
        self._error = error

    def __iter__(self) -> Iterator[Op]:
        while True:
            reply, error = self.reply, self._error
            self.reply = self._error = None
            try:
                op = self._steps.send(reply) if error is None else self._steps.throw(error)
            except StopIteration as stop:
                self.value = stop.value
                return
            yield op
