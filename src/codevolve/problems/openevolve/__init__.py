"""Problems in the OpenEvolve folder layout: ``initial_program.py``, ``evaluator.py``,
``config.yaml``, run unmodified with codevolve's sandbox around the evaluator."""

from codevolve.problems.openevolve.bundle import (
    Bundle,
    BundleError,
    bundle_from_encoded,
    make_bundle,
)
from codevolve.problems.openevolve.config import BundleConfig, read_config
from codevolve.problems.openevolve.loaded import load_problem, loaded_problem, problem_of
from codevolve.problems.openevolve.problem import OpenEvolveProblem, fitness
from codevolve.problems.openevolve.selection import Selection, load_folder, select_folder

__all__ = [
    "Bundle",
    "BundleConfig",
    "BundleError",
    "OpenEvolveProblem",
    "Selection",
    "bundle_from_encoded",
    "fitness",
    "load_folder",
    "load_problem",
    "loaded_problem",
    "make_bundle",
    "problem_of",
    "read_config",
    "select_folder",
]
