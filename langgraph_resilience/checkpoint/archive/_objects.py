"""`Archive`: the cold tier, objects in a bucket or a directory, named by URL.

Built on obstore (S3, GCS, Azure, the local filesystem and memory behind one
API, in Rust): it has the one primitive archival needs from every backend, a
conditional create (``PutMode.Create``: ``If-None-Match: *`` on S3, an
exclusive create on a filesystem), sync and async calls with the same names,
and its own retries with a bound. fsspec would need a different recipe per
backend for an exclusive create (s3fs has none) and is async only on some.

obstore is an optional dependency (``pip install 'langgraph-resilience[archive]'``):
it is imported when an archive is opened, never by the base install.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any, Literal
from urllib.parse import urlparse

from langgraph_resilience.errors import ArchiveError, ConfigError

__all__ = ["Archive", "PutOutcome"]

#: What a conditional put found: the object was created, was already there with
#: the same bytes (a retried archival), or was there with other bytes.
PutOutcome = Literal["created", "same", "differs"]
_SCHEMES = ("file", "memory", "s3", "gs", "az", "abfs", "abfss", "azure", "http", "https")


def _obstore() -> Any:
    try:
        return importlib.import_module("obstore")
    except ImportError as exc:
        raise ConfigError(
            "an Archive needs obstore: pip install 'langgraph-resilience[archive]' "
            "(or pip install obstore)"
        ) from exc


class Archive:
    """A cold tier for checkpoints: a bucket prefix, a directory or memory, by URL.

    Give it to a resilient saver (``archive=``); ``saver.archive_idle(...)`` moves
    idle threads into it and any read of an archived thread restores it.

    Args:
        url: ``file:///var/lib/app/archive`` (created if missing),
            ``s3://bucket/prefix``, ``gs://…``, ``az://…``, or ``memory://`` (this
            process only; share the one `Archive` between savers).
        options: passed to obstore's store (credentials, ``endpoint``, ``region``,
            ``client_options``); S3 also reads the usual ``AWS_*`` variables.
        max_retries: how often obstore retries a failed request.
        retry_timeout: how long obstore keeps retrying one request.

    Raises:
        ConfigError: an unknown scheme, or obstore is not installed.

    Example:
        >>> from langgraph_resilience import Archive
        >>> archive = Archive("memory://")
        >>> archive.url
        'memory://'
    """

    def __init__(
        self,
        url: str,
        *,
        options: Mapping[str, Any] | None = None,
        max_retries: int = 3,
        retry_timeout: timedelta = timedelta(seconds=30),
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in _SCHEMES:
            raise ConfigError(
                f"unknown archive URL {url!r}: use file:///path, s3://bucket/prefix, "
                "gs://bucket/prefix, az://container/prefix or memory://"
            )
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        self.url = url
        self._obs = _obstore()
        store = importlib.import_module("obstore.store")
        if parsed.scheme == "memory":
            self._store = store.MemoryStore()
        elif parsed.scheme == "file":
            path = parsed.path or "/"
            os.makedirs(path, exist_ok=True)
            self._store = store.LocalStore(path, mkdir=True)
        else:
            retry = {"max_retries": max_retries, "retry_timeout": retry_timeout}
            self._store = store.from_url(url, retry_config=retry, **dict(options or {}))

    def __repr__(self) -> str:
        return f"Archive({self.url!r})"

    def where(self, key: str) -> str:
        """The object's full name, for messages."""
        return f"{self.url.rstrip('/')}/{key}"

    def _failed(self, what: str, key: str, exc: BaseException) -> ArchiveError:
        return ArchiveError(f"archive {what} {self.where(key)} failed: {exc}", key=key)

    # -- sync -----------------------------------------------------------------------

    def put_new(self, key: str, body: bytes) -> PutOutcome:
        """Create ``key`` unless it exists (then compare): never overwrites."""
        try:
            self._obs.put(self._store, key, body, mode="create")
            return "created"
        except self._exists():
            return "same" if self.read(key) == body else "differs"
        except Exception as exc:
            raise self._failed("put of", key, exc) from exc

    def overwrite(self, key: str, body: bytes) -> None:
        try:
            self._obs.put(self._store, key, body)
        except Exception as exc:
            raise self._failed("put of", key, exc) from exc

    def read(self, key: str) -> bytes:
        try:
            return bytes(self._obs.get(self._store, key).bytes())
        except Exception as exc:
            raise self._failed("read of", key, exc) from exc

    def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (a whole path segment), sorted."""
        try:
            found = [m["path"] for chunk in self._obs.list(self._store, prefix) for m in chunk]
        except Exception as exc:
            raise self._failed("list of", prefix, exc) from exc
        return sorted(str(k) for k in found)

    def drop(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if not keys:
            return
        try:
            self._obs.delete(self._store, keys)
        except Exception as exc:
            raise self._failed("delete of", keys[0], exc) from exc

    # -- async ----------------------------------------------------------------------

    async def aput_new(self, key: str, body: bytes) -> PutOutcome:
        """Async twin of `put_new`."""
        try:
            await self._obs.put_async(self._store, key, body, mode="create")
            return "created"
        except self._exists():
            return "same" if await self.aread(key) == body else "differs"
        except Exception as exc:
            raise self._failed("put of", key, exc) from exc

    async def aoverwrite(self, key: str, body: bytes) -> None:
        try:
            await self._obs.put_async(self._store, key, body)
        except Exception as exc:
            raise self._failed("put of", key, exc) from exc

    async def aread(self, key: str) -> bytes:
        try:
            found = await self._obs.get_async(self._store, key)
            return bytes(await found.bytes_async())
        except Exception as exc:
            raise self._failed("read of", key, exc) from exc

    async def akeys(self, prefix: str) -> list[str]:
        try:
            found = [
                m["path"] async for chunk in self._obs.list(self._store, prefix) for m in chunk
            ]
        except Exception as exc:
            raise self._failed("list of", prefix, exc) from exc
        return sorted(str(k) for k in found)

    async def adrop(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if not keys:
            return
        try:
            await self._obs.delete_async(self._store, keys)
        except Exception as exc:
            raise self._failed("delete of", keys[0], exc) from exc

    # -- shared ---------------------------------------------------------------------

    def _exists(self) -> type[BaseException]:
        errors = importlib.import_module("obstore.exceptions")
        return errors.AlreadyExistsError  # type: ignore[no-any-return]


def archive_of(archive: Archive | str | None) -> Archive | None:
    """An `Archive` from a saver's ``archive=`` option (a URL opens one)."""
    if archive is None or isinstance(archive, Archive):
        return archive
    if isinstance(archive, str):
        return Archive(archive)
    raise ConfigError(
        f"archive must be an Archive or a URL such as 'file:///var/lib/app/archive', "
        f"got {type(archive).__name__}"
    )
