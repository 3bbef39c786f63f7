"""The notebooks run top to bottom (code cells in order, one module, no kernel)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A registered module, as a kernel's __main__ is: type hints resolve through it.
    module = types.ModuleType("__notebook__")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name}[{i}]", "exec"), module.__dict__)
