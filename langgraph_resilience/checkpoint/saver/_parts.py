"""The base of the saver's typed interfaces (`_interfaces`): what an interface
reads of its saver (`Store`), its I/O (sync, or `Bridge`d to an async saver's
event loop), and the one slotted part each interface is."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar, overload

from langgraph_resilience.checkpoint.saver._base import SaverState
from langgraph_resilience.checkpoint.store._store import Dialect, Statements

__all__ = [
    "AsyncPart",
    "AsyncStore",
    "Bridge",
    "Interface",
    "Part",
    "Store",
    "SyncIO",
    "SyncStore",
]

T = TypeVar("T")
P = TypeVar("P")
Make = Callable[[], Statements[T]]


class Store(Protocol):
    """What an interface reads of its saver."""

    @property
    def _dialect(self) -> Dialect: ...

    @property
    def _state(self) -> SaverState: ...

    @property
    def serde(self) -> Any: ...


class SyncIO(Protocol):
    def _write(self, statements: Make[T], **options: Any) -> T: ...

    def _query(self, statements: Make[T]) -> T: ...


class SyncStore(Store, SyncIO, Protocol):
    """A sync saver, as its interfaces use it."""


class AsyncStore(Store, Protocol):
    """An async saver, as its interfaces use it."""

    async def _write(self, statements: Make[T], **options: Any) -> T: ...

    async def _query(self, statements: Make[T]) -> T: ...

    def _bridge(self, coro: Coroutine[Any, Any, T]) -> T: ...


class Bridge:
    """The sync I/O of an async saver: a statement runs on the saver's event loop,
    called from another thread."""

    __slots__ = ("_saver",)

    def __init__(self, saver: AsyncStore) -> None:
        self._saver = saver

    def _write(self, statements: Make[T], **options: Any) -> T:
        return self._saver._bridge(self._saver._write(statements, **options))

    def _query(self, statements: Make[T]) -> T:
        return self._saver._bridge(self._saver._query(statements))


class Part:
    __slots__ = ("_io", "_saver")

    def __init__(self, saver: SyncStore) -> None:
        self._saver: Store = saver
        self._io: SyncIO = saver


class AsyncPart(Part):
    __slots__ = ()
    _saver: AsyncStore

    def __init__(self, saver: AsyncStore) -> None:
        self._saver = saver
        self._io = Bridge(saver)


class Interface(Generic[P]):
    """A saver's typed interface, as a read-only property: each read builds one
    on the saver, of ``make`` (a class) or of the class the saver's attribute
    ``make`` names (one a subclass or a `FaultPlan` may replace)."""

    def __init__(self, make: type[P] | str, doc: str) -> None:
        self._make = make
        self.__doc__ = doc

    @overload
    def __get__(self, saver: None, owner: type[Any]) -> Interface[P]: ...

    @overload
    def __get__(self, saver: object, owner: type[Any]) -> P: ...

    def __get__(self, saver: object, owner: type[Any]) -> Interface[P] | P:
        if saver is None:
            return self
        make: Any = getattr(saver, self._make) if isinstance(self._make, str) else self._make
        return make(saver)  # type: ignore[no-any-return]
