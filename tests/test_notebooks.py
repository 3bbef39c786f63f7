"""Every notebook in notebooks/ runs top to bottom in a Jupyter kernel.

The notebooks assert what they show (steps not re-run, effects once), so a
notebook that stops telling the truth fails here. They run in parallel kernels
(``notebooks/execute.py``, the same code that saves them with their outputs);
each test below reports one notebook.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

HERE = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location("notebooks_execute", HERE / "execute.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results() -> dict[str, float | BaseException]:
    started = time.monotonic()
    found: dict[str, float | BaseException] = _runner().execute(NOTEBOOKS, timeout=180)
    print(f"notebooks executed in {time.monotonic() - started:.1f} s")
    return found


def test_every_notebook_is_numbered_and_saved_with_outputs() -> None:
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, len(NOTEBOOKS) + 1)]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert nb.cells[0].cell_type == "markdown", f"{path.name} starts with what it shows"
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in code), f"{path.name} is saved unexecuted"
        texts = str([c.outputs for c in code])
        assert "object at 0x" not in texts and "Graph at 0x" not in texts, path.name
        assert "Traceback" not in texts, f"{path.name} is saved with an error in it"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, results: dict[str, float | BaseException]) -> None:
    result = results[path.name]
    if isinstance(result, BaseException):
        pytest.fail(f"{path.name} failed:\n{result}", pytrace=False)
