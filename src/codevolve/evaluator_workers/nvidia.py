"""What ``nvidia-smi`` says about the host's GPUs, for pinning and for heartbeats."""

from __future__ import annotations

import shutil
import subprocess

QUERY_TIMEOUT_S = 10.0  # seconds nvidia-smi may take


def query_gpus(field: str) -> list[str]:
    """One value of ``field`` (e.g. ``index``, ``name``) per GPU, in nvidia-smi's order; empty
    without a driver, or when the query fails."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]
