"""Renaming names in a source without changing what it does, and which names of a KernelBench
reference an export renames so that neither source reads the other's bindings."""

from __future__ import annotations

import pytest

from codevolve.core.export import ExportRefused
from codevolve.core.module_names import module_names, rename
from codevolve.problems.kernelbench.export import reference_renames

SOURCE = '''import numpy as np
from math import sqrt


@helper
def helper(helper, x=helper):
    """helper stays in strings."""
    return helper + obj.helper + call(helper=x) + f(np.sqrt(sqrt(x)))


class Model(Base, helper=helper):
    pass
'''


def test_rename_rewrites_variables_and_keeps_attributes_keywords_and_strings() -> None:
    renamed = rename(SOURCE, {"helper": "helper_reference"})
    assert (
        "@helper_reference\ndef helper_reference(helper_reference, x=helper_reference):" in renamed
    )
    assert '"""helper stays in strings."""' in renamed
    assert "return helper_reference + obj.helper + call(helper=x)" in renamed
    assert "class Model(Base, helper=helper_reference):" in renamed


def test_rename_writes_imports_again_with_as() -> None:
    renamed = rename(SOURCE, {"np": "np_reference", "sqrt": "sqrt_reference"})
    assert renamed.startswith(
        "import numpy as np_reference\nfrom math import sqrt as sqrt_reference\n"
    )
    assert "f(np_reference.sqrt(sqrt_reference(x)))" in renamed


def test_rename_refuses_a_dotted_import_of_a_renamed_package() -> None:
    with pytest.raises(ExportRefused, match=r"import torch\.nn"):
        rename("import torch.nn\n", {"torch": "torch_reference"})


def test_module_names_are_the_top_level_bindings_only() -> None:
    source = (
        "import a.b\nx, (y, z) = 1, (2, 3)\nfor i in []: pass\ndef f(q): w = 1\n[k for k in []]\n"
    )
    assert module_names(source) == {"a", "x", "y", "z", "i", "f"}


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
