"""Execute the notebooks in Jupyter kernels, several at once; optionally save them.

    .venv/bin/python notebooks/execute.py            # run all, save them with outputs
    .venv/bin/python notebooks/execute.py 03 05      # only those whose name starts so
    .venv/bin/python notebooks/execute.py --check    # run, do not save

``tests/test_notebooks.py`` runs the same function (``--check``): a notebook that
raises in any cell fails the test, with the cell and its traceback.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
NOTEBOOKS = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))


async def _execute(path: Path, save: bool, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,  # no timestamps in the saved files
        resources={"metadata": {"path": str(HERE)}},
    )
    started = time.monotonic()
    await client.async_execute()
    if save:
        nbformat.write(nb, path)
    return time.monotonic() - started


async def _all(
    paths: list[Path], save: bool, timeout: int, parallel: int
) -> dict[str, float | BaseException]:
    gate = asyncio.Semaphore(parallel)

    async def one(path: Path) -> float:
        async with gate:
            return await _execute(path, save, timeout)

    results = await asyncio.gather(*(one(p) for p in paths), return_exceptions=True)
    return {p.name: r for p, r in zip(paths, results, strict=True)}


def execute(
    paths: list[Path] | None = None, *, save: bool = False, timeout: int = 120, parallel: int = 4
) -> dict[str, float | BaseException]:
    """Run ``paths`` (default: every numbered notebook), ``parallel`` kernels at a
    time; returns each notebook's seconds, or the error it stopped on (nbclient's
    CellExecutionError names the cell and holds its traceback). A notebook that
    fails is not saved."""
    return asyncio.run(_all(list(paths or NOTEBOOKS), save, timeout, parallel))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    chosen = [p for p in NOTEBOOKS if not args or any(p.name.startswith(a) for a in args)]
    failed = False
    for name, result in execute(chosen, save="--check" not in sys.argv).items():
        if isinstance(result, BaseException):
            failed = True
            text = re.sub(r"\x1b\[[0-9;]*m", "", str(result))
            print(f"{name}: FAILED\n{text[:1500]}\n...\n{text[-2500:]}")
        else:
            print(f"{name}: {result:.1f} s")
    sys.exit(1 if failed else 0)
