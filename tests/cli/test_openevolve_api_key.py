"""A key written in a folder's config.yaml (``llm.api_key``) is sent to the endpoint and kept
nowhere else: not in the job's stored config, the stored bundle, the database file or what the
command prints."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from pathlib import Path

import pytest

from tests.cli.conftest import codevolve
from tests.llm_server import completion, serve

KEY = "sk-config-only-7f3a9c2e41b8d605"
INITIAL = "# EVOLVE-BLOCK-START\nX = 1.0\n# EVOLVE-BLOCK-END\n"
EVALUATOR = """\
import importlib.util


def evaluate(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"combined_score": -abs(module.X - 3.0)}
"""
ANSWER = "```\n<<<<<<< SEARCH\nX = 1.0\n=======\nX = 2.0\n>>>>>>> REPLACE\n```\n"


def folder(root: Path, url: str) -> Path:
    problem = root / "problem"
    problem.mkdir()
    (problem / "initial_program.py").write_text(INITIAL)
    (problem / "evaluator.py").write_text(EVALUATOR)
    (problem / "config.yaml").write_text(
        f'llm:\n  api_base: "{url}"\n  api_key: "{KEY}"  # {KEY}\n  models:\n    - name: "m"\n'
    )
    return problem


@pytest.mark.slow
async def test_a_config_key_is_sent_and_stored_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = tmp_path / "run.sqlite"
    async with serve(lambda _request: completion(ANSWER)) as server:
        problem = folder(tmp_path, server.url)
        args = ["run", "--problem-dir", str(problem), "--proposer", "llm", "--proposals", "3"]
        outcome = await asyncio.to_thread(codevolve, *args, "--db", str(db), "--quiet")
    assert outcome.returncode == 0, outcome.stderr
    assert server.requests
    assert {r.headers.get("authorization") for r in server.requests} == {f"Bearer {KEY}"}
    assert KEY not in outcome.stdout + outcome.stderr
    with sqlite3.connect(db) as connection:
        (config,) = connection.execute("SELECT config FROM jobs").fetchone()
        (files,) = connection.execute("SELECT files FROM bundles").fetchone()
    assert '"CODEVOLVE_LLM_API_KEY"' in str(config) and KEY not in str(config)
    stored_config = base64.b64decode(json.loads(files)["config.yaml"]).decode()
    assert "${CODEVOLVE_LLM_API_KEY}" in stored_config and KEY not in stored_config
    assert not [path for path, data in stored_files(tmp_path) if KEY.encode() in data]


def stored_files(folder: Path) -> list[tuple[Path, bytes]]:
    """The database file, its write-ahead log and its shared memory, as bytes."""
    return [(path, path.read_bytes()) for path in folder.glob("run.sqlite*")]
