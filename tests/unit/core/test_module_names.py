"""Renaming names in a source without changing what it does (core/module_names.py)."""

from __future__ import annotations

import pytest

from codevolve.core.export import ExportRefused
from codevolve.core.module_names import module_names, rename

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
