"""The compose file and Dockerfile describe a deployment that can start: no Docker engine runs
here, so the checks are on the text: services, commands the CLI accepts, settings that exist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from codevolve.services.cli import _parser
from codevolve.services.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
ENV_PREFIX = "CODEVOLVE_"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def test_the_compose_file_has_the_whole_deployment(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "controller", "worker-cpu", "worker-gpu"} <= set(services)
    assert "gpu" in services["worker-gpu"]["profiles"]
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert services["worker-cpu"]["command"][:3] == ["worker", "--capability", "cpu"]
    assert services["worker-gpu"]["command"][:3] == ["worker", "--capability", "gpu"]
    assert services["controller"]["command"][0] == "serve"


def test_every_service_command_is_one_the_cli_accepts(compose: dict[str, Any]) -> None:
    parser = _parser()
    commands = [
        s["command"] for s in compose["services"].values() if "build" in s and "command" in s
    ]
    assert len(commands) >= 3
    for command in commands:
        args = parser.parse_args(command)  # exits (fails the test) on an unknown option
        assert callable(args.handler)


def test_environment_names_are_settings_and_workers_get_no_database(
    compose: dict[str, Any],
) -> None:
    fields = set(Settings.model_fields)
    for name, service in compose["services"].items():
        for variable in service.get("environment", {}):
            if variable.startswith(ENV_PREFIX):
                assert variable.removeprefix(ENV_PREFIX).lower() in fields, (name, variable)
        if name.startswith("worker"):
            assert not any("DB" in v or "DATABASE" in v for v in service["environment"]), name


def test_the_image_runs_the_codevolve_command() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["codevolve"]' in dockerfile
    assert "pip install" in dockerfile and "COPY src" in dockerfile
