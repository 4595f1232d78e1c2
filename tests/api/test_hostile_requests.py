"""Requests an attacker would send: bodies JSON cannot answer (NaN, Infinity, lone surrogates),
oversized bodies (declared and chunked), loosely typed values. Each gets a short JSON 4xx, never a
500 and never a copy of the input."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from codevolve.problems.registry import problem_names
from codevolve.services.api.errors import MAX_ERRORS
from codevolve.services.api.limits import MAX_BUNDLE_BODY_BYTES, MAX_JSON_BODY_BYTES
from tests.api.conftest import Api, admin

JSON = {"content-type": "application/json"}


async def _post(api: Api, path: str, body: bytes, headers: dict[str, str]) -> Any:
    response = await api.client.post(path, content=body, headers={**JSON, **headers})
    assert response.headers["content-type"] == "application/json", response.text
    return response


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/jobs", b'{"problem":"gemm-tiling","config":{"proposals":NaN}}'),
        ("/api/v1/jobs", b'{"problem":"gemm-tiling","config":{"max_wall_s":Infinity}}'),
        ("/api/v1/jobs", b'{"problem":"gemm-tiling","config":{"exploit_ratio":-Infinity}}'),
        ("/api/v1/jobs", b'{"problem":"\\ud800"}'),
        ("/api/v1/tokens", b'{"owner":"\\ud800"}'),
        ("/api/v1/jobs/bundle", b'{"files":{"\\udfff.py":"eA=="}}'),
        ("/api/v1/jobs/bundle", b'{"files":{"a.py":NaN}}'),
    ],
)
async def test_input_json_cannot_encode_is_a_422_without_the_input(
    api: Api, path: str, body: bytes
) -> None:
    response = await _post(api, path, body, admin())
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert set(error) == {"loc", "msg", "type"}  # no "input": it is what could not be encoded
    assert error["loc"][0] == "body"


async def test_a_long_input_is_not_echoed_and_errors_are_capped(api: Api) -> None:
    long = "x" * 500_000
    response = await _post(api, "/api/v1/jobs", json.dumps({"problem": long}).encode(), admin())
    assert response.status_code == 422
    assert len(response.content) < 1000
    assert response.json()["detail"][0]["loc"] == ["body", "problem"]

    files = {("p" * 300) + str(i): 7 for i in range(100)}  # 100 errors, each keyed by a long path
    response = await _post(
        api, "/api/v1/jobs/bundle", json.dumps({"files": files}).encode(), admin()
    )
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert len(detail) == MAX_ERRORS + 1 and detail[-1]["type"] == "too_many_errors"
    assert all(len(str(part)) <= 64 for error in detail for part in error["loc"])
    assert len(response.content) < 10_000


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"proposals": "100"}, "proposals"),
        ({"proposals": True}, "proposals"),
        ({"proposals": None}, "proposals"),
        ({"proposals": 10.0}, "proposals"),
        ({"seed": "1"}, "seed"),
        ({"exploit_ratio": "0.5"}, "exploit_ratio"),
        ({"max_wall_s": False}, "max_wall_s"),
    ],
)
async def test_config_values_must_have_their_json_type(
    api: Api, config: dict[str, Any], field: str
) -> None:
    headers = await api.token("alice")
    body = {"problem": "gemm-tiling", "config": config}
    response = await api.client.post("/api/v1/jobs", json=body, headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "config", field]
    assert (await api.client.get("/api/v1/jobs", headers=headers)).json()["jobs"] == []


async def test_token_fields_are_strict_too(api: Api) -> None:
    for body in ({"owner": 7}, {"owner": "eve", "can_upload": "yes"}, {"owner": "eve", "x": 1}):
        response = await api.client.post("/api/v1/tokens", json=body, headers=admin())
        assert response.status_code == 422, body


async def test_the_schema_lists_the_known_problems_and_the_bundle_pattern(api: Api) -> None:
    schema = (await api.client.get("/openapi.json")).json()
    problem = schema["components"]["schemas"]["JobCreate"]["properties"]["problem"]
    enum, pattern = problem["anyOf"]
    assert enum["enum"] == problem_names()
    assert pattern["pattern"] == "^bundle:[0-9a-f]{64}$"
    proposals = schema["components"]["schemas"]["JobConfigIn"]["properties"]["proposals"]
    assert proposals["type"] == "integer" and "anyOf" not in proposals  # null is not offered


async def test_unknown_problems_and_malformed_bundle_names_are_422s(api: Api) -> None:
    headers = await api.token("alice", can_upload=True)
    for problem, kind in (("tsp", "unknown_problem"), ("bundle:xyz", "unknown_bundle")):
        response = await api.client.post("/api/v1/jobs", json={"problem": problem}, headers=headers)
        assert response.status_code == 422
        (error,) = response.json()["detail"]
        assert error["loc"] == ["body", "problem"] and error["type"] == kind, error


async def test_a_declared_body_over_the_limit_is_a_413_before_it_is_read(api: Api) -> None:
    headers = {**admin(), **JSON}
    body = b'{"problem": "' + b"x" * MAX_JSON_BODY_BYTES + b'"}'
    response = await api.client.post("/api/v1/jobs", content=body, headers=headers)
    assert response.status_code == 413
    assert response.json() == {
        "detail": f"request body too large: the limit is {MAX_JSON_BODY_BYTES} bytes"
    }
    # a bundle upload has its own, larger limit: the same body is read, and refused as a 422
    response = await api.client.post("/api/v1/jobs/bundle", content=body, headers=headers)
    assert response.status_code == 422


async def test_a_chunked_body_over_the_limit_is_refused_as_it_streams(api: Api) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"problem": "'
        for _ in range(64):  # 64 MiB if it were all read
            sent += 1 << 20
            yield b"x" * (1 << 20)
        yield b'"}'

    response = await api.client.post(
        "/api/v1/jobs/bundle", content=chunks(), headers={**admin(), **JSON}
    )
    assert response.status_code == 413
    assert str(MAX_BUNDLE_BODY_BYTES) in response.json()["detail"]
    assert sent <= MAX_BUNDLE_BODY_BYTES + (2 << 20)  # it stopped reading at the limit


async def test_a_deeply_nested_bundle_file_is_a_422(api: Api) -> None:
    import base64

    files = {
        "initial_program.py": base64.b64encode(b"x = " + b"-" * 200_000 + b"1\n").decode(),
        "config.yaml": base64.b64encode(b"[" * 100_000).decode(),
    }
    headers = await api.token("alice", can_upload=True)
    response = await api.client.post("/api/v1/jobs/bundle", json={"files": files}, headers=headers)
    assert response.status_code == 422, response.text
    messages = {e["loc"][-1]: e["msg"] for e in response.json()["detail"]}
    assert "nested too deeply" in messages["initial_program.py"]
    assert "nested too deeply" in messages["config.yaml"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"\xff\xfe{}", 422),  # not UTF-8
        (b"[" * 100_000 + b"]" * 100_000, 400),  # nested past the parser's recursion limit
        (b'{"problem": ', 422),  # cut short
        (b"", 422),  # no body at all
    ],
)
async def test_bodies_that_are_not_json_text_are_short_4xx(
    api: Api, body: bytes, status: int
) -> None:
    response = await _post(api, "/api/v1/jobs", body, admin())
    assert response.status_code == status, response.text
    assert len(response.content) < 500
