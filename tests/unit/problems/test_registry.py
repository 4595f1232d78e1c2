"""The registry: plug-ins from the installed entry points, and one line for a broken one."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import codevolve
from codevolve.core.errors import UnknownProblemError
from codevolve.core.plugin import ENTRY_POINTS, DeviceJob, ProblemPlugin
from codevolve.core.results import JobResults, ResultsPage, Row
from codevolve.problems import registry
from codevolve.problems.errors import PluginError

ROOT = Path(__file__).resolve().parents[3]
PROBLEMS = Path(codevolve.__file__).parent / "problems"


def _declared() -> dict[str, str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared: dict[str, str] = pyproject["project"]["entry-points"][ENTRY_POINTS]
    return declared


def test_the_installed_entry_points_are_those_pyproject_declares() -> None:
    installed = {e.name: e.value for e in metadata.entry_points(group=ENTRY_POINTS)}
    assert {n: v for n, v in installed.items() if v.startswith("codevolve.")} == _declared(), (
        "the installed metadata is stale: run `make install` (pip install -e .)"
    )


def test_every_problem_folder_with_a_plugin_is_declared() -> None:
    folders = {p.parent.name for p in PROBLEMS.glob("*/__init__.py") if "PLUGIN =" in p.read_text()}
    packages = {value.split(":")[0].rsplit(".", 1)[1] for value in _declared().values()}
    assert folders == packages


def test_formats_are_plugins_but_not_problems_to_run() -> None:
    assert "kernelbench" in registry.plugins()
    assert "kernelbench" not in registry.problem_names()
    with pytest.raises(UnknownProblemError, match="known problems: gemm-kernel-gpu, gemm-tiling"):
        registry.get_problem("kernelbench")
    assert [p.name for p in registry.serving("bundle:" + "0" * 64)] == ["kernelbench"]
    assert [p.name for p in registry.serving("gemm-tiling")] == ["gemm-tiling"]
    assert registry.serving("no-such-problem") == ()


def test_the_device_job_table_is_the_plugins_jobs() -> None:
    jobs = registry.device_jobs()
    assert jobs["gemm.measure"].target.endswith("gemm_jobs:measure_job")
    assert [name for name, job in jobs.items() if job.cpu] == ["kb.judge"]


def _entry(name: str, value: str) -> metadata.EntryPoint:
    return metadata.EntryPoint(name=name, value=value, group=ENTRY_POINTS)


BROKEN_PLUGIN = ProblemPlugin(name="other-name")
NOT_A_PLUGIN = object()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("no_such_package_xyz:PLUGIN", "cannot be loaded (entry point broken = "),
        ("codevolve.problems.gemm_tiling:NO_SUCH_NAME", "AttributeError"),
        (f"{__name__}:NOT_A_PLUGIN", "is a object, not a ProblemPlugin"),
        (f"{__name__}:BROKEN_PLUGIN", "is named 'other-name'; the entry point's name"),
    ],
)
def test_a_broken_plugin_is_named_in_one_line(value: str, says: str) -> None:
    with pytest.raises(PluginError, match="problem plug-in 'broken'") as raised:
        registry.load_plugin(_entry("broken", value))
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_two_plugins_may_not_declare_the_same_device_job() -> None:
    job = DeviceJob("x.run", "a.b:c")
    plugins = [
        ProblemPlugin(name="a", device_jobs=(job,)),
        ProblemPlugin(name="b", device_jobs=(job,)),
    ]
    with pytest.raises(PluginError, match=r"'x\.run' is declared by the problem plug-ins 'a' and"):
        registry.check_device_jobs(plugins)
    lonely = ProblemPlugin(name="c", device_jobs=(DeviceJob("y.run", "a.b"),))
    with pytest.raises(PluginError, match=r"is not 'package\.module:function'"):
        registry.check_device_jobs([lonely])


def _page(segment: str) -> ResultsPage:
    async def row(_records: JobResults) -> Row | None:
        return None

    return ResultsPage(
        segment=segment,
        title="t",
        subtitle="",
        key="k",
        row=row,
        summary=lambda r, m: {},
        columns=(),
    )


def test_two_plugins_may_not_claim_the_same_results_page_or_file_option() -> None:
    pages = [
        ProblemPlugin(name="a", results=_page("same")),
        ProblemPlugin(name="b", results=_page("same")),
    ]
    with pytest.raises(PluginError, match=r"the results page /same is claimed by .* 'a' and 'b'"):
        registry.check_claims(pages)
    with pytest.raises(PluginError, match=r"segment 'Not/A/Word' is not a lower-case word"):
        registry.check_claims([ProblemPlugin(name="c", results=_page("Not/A/Word"))])
    kernelbench = registry.plugins()["kernelbench"]
    twin = ProblemPlugin(name="twin", problem_file=kernelbench.problem_file)
    with pytest.raises(PluginError, match=r"the option --kernel-problem is claimed by"):
        registry.check_claims([kernelbench, twin])
    registry.check_claims(registry.plugins().values())  # the installed plug-ins claim apart
