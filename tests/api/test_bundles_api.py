"""Uploading an OpenEvolve-layout bundle: stored once by content, a job on ``bundle:<sha256>``;
malformed bundles are 422s naming the file, oversized ones 413s, and nothing is half-created."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from sqlalchemy import func, select

from codevolve.problems.openevolve.bundle import MAX_BUNDLE_BYTES
from codevolve.program_db import repository
from codevolve.program_db.models import BundleRow, JobRow
from tests.api.conftest import Api

INITIAL = b"# EVOLVE-BLOCK-START\ndef solve(x):\n    return x\n# EVOLVE-BLOCK-END\n"
EVALUATOR = b"def evaluate(program_path):\n    return {'combined_score': 1.0}\n"
CONFIG = b"max_iterations: 10\n"


def encoded(files: dict[str, bytes]) -> dict[str, str]:
    return {path: base64.b64encode(data).decode() for path, data in files.items()}


def bundle(**changes: bytes | None) -> dict[str, str]:
    files: dict[str, bytes | None] = {
        "initial_program.py": INITIAL,
        "evaluator.py": EVALUATOR,
        "config.yaml": CONFIG,
        **changes,
    }
    return encoded({path: data for path, data in files.items() if data is not None})


async def _counts(api: Api) -> tuple[int, int]:
    async with api.sessions() as session:
        jobs = await session.scalar(select(func.count()).select_from(JobRow))
        bundles = await session.scalar(select(func.count()).select_from(BundleRow))
    return int(jobs or 0), int(bundles or 0)


async def test_an_uploaded_bundle_is_stored_once_and_runs_as_bundle_sha256(api: Api) -> None:
    headers = await api.token("alice", can_upload=True)
    body = {"files": bundle(), "config": {"proposals": 5, "seed": 2}}
    first = await api.client.post("/api/v1/jobs/bundle", json=body, headers=headers)
    assert first.status_code == 201, first.text
    problem = first.json()["problem"]
    assert problem.startswith("bundle:") and len(problem) == len("bundle:") + 64
    second = await api.client.post("/api/v1/jobs/bundle", json=body, headers=headers)
    assert second.json()["problem"] == problem
    assert await _counts(api) == (2, 1)  # two jobs, one bundle
    async with api.sessions() as session:
        stored = await repository.get_bundle(session, problem)
    assert stored is not None and stored.files["evaluator.py"] == EVALUATOR
    assert first.json()["max_proposals"] == 5  # the request's key wins over config.yaml
    plain = await api.client.post("/api/v1/jobs/bundle", json={"files": bundle()}, headers=headers)
    assert plain.json()["max_proposals"] == 10  # config.yaml's max_iterations
    assert isinstance(plain.json()["warnings"], list)
    # a stored bundle can be named again by its problem name
    again = await api.client.post("/api/v1/jobs", json={"problem": problem}, headers=headers)
    assert again.status_code == 201


async def _bad(api: Api, files: dict[str, str], *, status: int = 422) -> Any:
    headers = await api.token("alice", can_upload=True)
    response = await api.client.post("/api/v1/jobs/bundle", json={"files": files}, headers=headers)
    assert response.status_code == status, response.text
    assert await _counts(api) == (0, 0)
    return response.json()["detail"]


async def test_malformed_bundles_are_422s_naming_the_file(api: Api) -> None:
    detail = await _bad(api, bundle(**{"evaluator.py": b"def evaluate(:\n"}))
    assert detail[0]["loc"] == ["body", "files", "evaluator.py"]
    detail = await _bad(api, bundle(**{"evaluator.py": None}))
    assert "evaluator.py" in detail[0]["msg"]
    detail = await _bad(api, bundle(**{"config.yaml": b"- a list\n"}))
    assert detail[0]["loc"] == ["body", "files", "config.yaml"]
    detail = await _bad(api, {**bundle(), "../escape.py": "eA=="})
    assert detail[0]["loc"] == ["body", "files", "../escape.py"]
    detail = await _bad(api, {**bundle(), "data.bin": "not base64!"})
    assert detail[0]["msg"] == "not valid base64"


async def test_a_config_yaml_value_that_is_out_of_range_is_a_422(api: Api) -> None:
    detail = await _bad(api, bundle(**{"config.yaml": b"max_iterations: -3\n"}))
    assert "max_iterations" in detail[0]["msg"] or "max_proposals" in detail[0]["msg"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            b"max_iterations: 99999999999999999999\n",
            "config.yaml: max_iterations must be at most 10000000, got 99999999999999999999",
        ),
        (b"max_iterations: .nan\n", "config.yaml: max_iterations must be a finite number, got nan"),
        (
            b"database:\n  exploitation_ratio: .inf\n",
            "config.yaml: database.exploitation_ratio must be a finite number, got inf",
        ),
    ],
)
async def test_config_yaml_is_held_to_the_apis_caps(api: Api, text: bytes, message: str) -> None:
    """The same caps as the request's own keys, named by the config.yaml key; nothing stored."""
    detail = await _bad(api, bundle(**{"config.yaml": text}))
    assert detail == [{"loc": ["body", "config"], "msg": message, "type": "bad_config"}]
    assert await _counts(api) == (0, 0)


async def test_an_oversized_bundle_is_a_413(api: Api) -> None:
    big = b"#" * (MAX_BUNDLE_BYTES // 2 + 1)
    detail = await _bad(api, bundle(**{"a.txt": big, "b.txt": big}), status=413)
    assert str(MAX_BUNDLE_BYTES) in detail


async def test_an_unknown_bundle_name_is_a_422(api: Api) -> None:
    headers = await api.token("alice", can_upload=True)
    response = await api.client.post(
        "/api/v1/jobs", json={"problem": "bundle:" + "ab" * 32}, headers=headers
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "problem"]
