"""Which names of a KernelBench reference its export renames, so that neither source reads the
other's bindings (problems/kernelbench/export.py)."""

from __future__ import annotations

from codevolve.problems.kernelbench.export import reference_renames

PROGRAM = """import torch
import torch.nn as nn
batch = 16
scale = batch * 2
noise = torch.randn(4)
def helper(x):
    return x + x
def kept(x):
    return x
class ModelNew(nn.Module):
    pass
"""
REFERENCE = """import torch.nn
import torch.nn as nn
batch = 16
scale = batch * 2
noise = torch.randn(4)
def helper(x):
    return x * 2
def kept(x):
    return x
def uses(x):
    return helper(x)
class Model(nn.Module):
    pass
def test_model_new():
    pass
"""


def test_the_reference_keeps_what_means_the_same_and_renames_the_rest() -> None:
    renames = reference_renames(PROGRAM, REFERENCE, reserved=frozenset({"test_model_new"}))
    # an evolved helper; a call that draws new values; a name the export defines
    assert renames == {
        "helper": "helper_reference",
        "noise": "noise_reference",
        "test_model_new": "test_model_new_reference",
    }


def test_a_shared_statement_reading_a_renamed_name_is_renamed_too() -> None:
    program = PROGRAM.replace("batch = 16", "batch = 32")  # scale's text is the same, not its value
    renames = reference_renames(program, REFERENCE, reserved=frozenset())
    assert {"batch", "scale"} <= set(renames)
    assert "kept" not in renames
