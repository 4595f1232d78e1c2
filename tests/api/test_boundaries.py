"""The API is its own process's composition root: importing it loads no command-line code and no
embedded run (import-linter checks the imports; this checks what a server process loads)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import codevolve.services.api.app
loaded = sorted(
    name for name in sys.modules
    if name.startswith(("codevolve.services.cli", "codevolve.services.runtime.embedded"))
)
print(",".join(loaded))
"""


def test_importing_the_api_loads_neither_the_command_line_nor_the_embedded_run() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""
