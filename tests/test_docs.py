"""The API reference builds in strict mode, and documents every public name.

`make docs` runs the same build; a broken link, a missing page or a docstring the
reference cannot parse fails it here first (about 12 s).
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

# Each public module, and the API page it is documented on (docs/api/<page>.md).
PAGES = {
    "langgraph_resilience": "langgraph_resilience",
    "langgraph_resilience.errors": "errors",
    "langgraph_resilience.checkpoint": "checkpoint",
    "langgraph_resilience.checkpoint.sqlite": "checkpoint-sqlite",
    "langgraph_resilience.checkpoint.sqlite.aio": "checkpoint-sqlite",
    "langgraph_resilience.checkpoint.postgres": "checkpoint-postgres",
    "langgraph_resilience.checkpoint.postgres.aio": "checkpoint-postgres",
    "langgraph_resilience.testing": "testing",
    "langgraph_resilience.agents": "agents",
    "langgraph_resilience.history": "history",
    "langgraph_resilience.checkpoint.archive": "archive",
    "langgraph_resilience.cli": "cli",
    "langgraph_resilience.server": "server",
    "langgraph_resilience.cache.postgres": "cache",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocstrings", reason="the docs extra (part of dev) is not installed")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert done.returncode == 0, "\n".join(warnings) or done.stderr[-3000:]
    return out


@pytest.mark.parametrize("module", sorted(PAGES))
def test_every_public_name_has_its_entry_in_the_api_reference(site: Path, module: str) -> None:
    html = (site / "api" / PAGES[module] / "index.html").read_text()
    anchors = set(re.findall(r'id="(langgraph_resilience[\w.]*)"', html))
    names = importlib.import_module(module).__all__
    missing = [
        n for n in names if f"{module}.{n}" not in anchors and not _elsewhere(anchors, module, n)
    ]
    assert missing == [], f"{module}: no entry for {missing} on docs/api/{PAGES[module]}.md"


def _elsewhere(anchors: set[str], module: str, name: str) -> bool:
    """A name documented under the module that defines it (``classify`` is both a
    submodule and the function the package exports)."""
    return any(a.startswith(module + ".") and a.endswith("." + name) for a in anchors)
