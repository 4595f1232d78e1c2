"""A KernelBench problem as a job stores it: the user's file, its initial program, the judge's
settings, as the files of a bundle (``bundle:<sha256>``).

A kernel bundle is ``reference.py`` (the user's file, verbatim), ``initial_program.py`` (built from
it by format.py) and ``kernelbench.json`` (:class:`JudgeSettings` and the file's name). It travels
and is stored like an OpenEvolve bundle (the database's ``bundles`` table, Redis for distributed
workers), so ``--resume``, the server and remote GPU workers find it by name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from codevolve.problems.kernelbench.defaults import JUDGE_BASELINES, JUDGE_SEEDS, JUDGE_TRIALS
from codevolve.problems.kernelbench.format import KernelProblemError, read_problem

SPEC_FILE = "kernelbench.json"  # a kernel bundle's settings (problems/openevolve/bundle.py)
REFERENCE_FILE = "reference.py"
INITIAL_FILE = "initial_program.py"
DISTRIBUTIONS = ("kernelbench", "signed", "wide")
BASELINES = JUDGE_BASELINES


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """How the judge checks and times one problem's candidates.

    ``forbid``: aten operators a solution must not run (``aten.mm``: "write the matmul yourself");
    ``baselines``: ``eager`` always, ``compile`` to time ``torch.compile`` of the reference too
    (compiled once per device process and problem, tens of seconds on first use, then from the
    worker's compile cache: device/kb_baselines.py);
    ``tolerance``: atol = rtol for every output (None: by dtype, 1e-4 fp32, 1e-2 fp16/bf16).
    """

    seeds: int = JUDGE_SEEDS  # correctness trials per distribution, each on inputs of its own seed
    trials: int = JUDGE_TRIALS  # timed rounds
    warmup: int = 3  # untimed calls before the timed rounds
    forbid: tuple[str, ...] = ()
    baselines: tuple[str, ...] = BASELINES
    tolerance: float | None = None
    timeout_s: float = 600.0  # seconds per judged program (the first one compiles the baseline)

    def __post_init__(self) -> None:
        if not 1 <= self.seeds <= 16:
            raise KernelProblemError(f"seeds must be 1..16, got {self.seeds}")
        if not 3 <= self.trials <= 1000:
            raise KernelProblemError(f"trials must be 3..1000, got {self.trials}")
        if not 0 <= self.warmup <= 100:
            raise KernelProblemError(f"warmup must be 0..100, got {self.warmup}")
        unknown = [b for b in self.baselines if b not in BASELINES]
        if "eager" not in self.baselines or unknown:
            raise KernelProblemError(
                f"baselines must include eager and may add compile, got {list(self.baselines)}"
            )
        for op in self.forbid:
            if not op.startswith("aten.") or not op[5:].replace("_", "").replace(".", "").isalnum():
                raise KernelProblemError(f"forbid names aten operators (aten.mm), not {op!r}")
        if self.tolerance is not None and not 0 < self.tolerance < 1:
            raise KernelProblemError(f"tolerance must be in (0, 1), got {self.tolerance}")
        if not 10 <= self.timeout_s <= 7200:
            raise KernelProblemError(f"timeout must be 10..7200 s, got {self.timeout_s}")


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """A problem file with its judge's settings."""

    name: str  # the file's stem
    reference: str  # the file's text
    initial_program: str
    settings: JudgeSettings = field(default_factory=JudgeSettings)


def make_spec(source: str, *, name: str, settings: JudgeSettings | None = None) -> KernelSpec:
    """Check a user's problem file and build its spec (KernelProblemError names the fault)."""
    problem = read_problem(source, name=name)
    return KernelSpec(
        name=problem.name,
        reference=source,
        initial_program=problem.initial_program,
        settings=settings or JudgeSettings(),
    )


def spec_files(spec: KernelSpec) -> dict[str, bytes]:
    """The bundle files of ``spec``."""
    meta = {"name": spec.name, "settings": asdict(spec.settings)}
    return {
        REFERENCE_FILE: spec.reference.encode(),
        INITIAL_FILE: spec.initial_program.encode(),
        SPEC_FILE: (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(),
    }


def spec_of_files(files: Mapping[str, bytes]) -> KernelSpec:
    """The spec stored in a kernel bundle's files (KernelProblemError when they are not one)."""
    missing = [f for f in (SPEC_FILE, REFERENCE_FILE, INITIAL_FILE) if f not in files]
    if missing:
        raise KernelProblemError(f"a kernel bundle needs {', '.join(missing)}")
    try:
        meta = json.loads(files[SPEC_FILE])
        raw: dict[str, Any] = dict(meta["settings"])
        for key in ("forbid", "baselines"):
            raw[key] = tuple(raw.get(key, ()))
        settings = JudgeSettings(**raw)
        name = str(meta["name"])
    except (ValueError, KeyError, TypeError) as exc:
        raise KernelProblemError(f"{SPEC_FILE}: not a kernel problem's settings ({exc})") from exc
    return KernelSpec(
        name=name,
        reference=files[REFERENCE_FILE].decode(),
        initial_program=files[INITIAL_FILE].decode(),
        settings=settings,
    )


def settings_of(values: Mapping[str, int | str]) -> JudgeSettings:
    """The judge's settings as the command line types them (``forbid`` and ``baselines``
    comma-separated); KernelProblemError starts with the setting's name."""
    defaults = JudgeSettings()

    def words(name: str) -> tuple[str, ...]:
        return tuple(word.strip() for word in str(values[name]).split(",") if word.strip())

    return JudgeSettings(
        seeds=int(values.get("seeds", defaults.seeds)),
        trials=int(values.get("trials", defaults.trials)),
        forbid=words("forbid") if "forbid" in values else defaults.forbid,
        baselines=words("baselines") if "baselines" in values else defaults.baselines,
    )


def bundle_of_file(source: str, name: str, settings: JudgeSettings) -> dict[str, bytes]:
    """The bundle files of a user's problem file (KernelProblemError names the fault)."""
    return spec_files(make_spec(source, name=name, settings=settings))
