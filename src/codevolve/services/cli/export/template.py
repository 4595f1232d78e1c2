"""The text of an exported module around its program: the ``*.txt`` templates beside this file
(``string.Template``, ``$name`` fields), each read once."""

from __future__ import annotations

import functools
from importlib import resources
from string import Template


@functools.cache
def module_template(file: str) -> Template:
    """The template in ``file`` of this package."""
    return Template((resources.files(__package__) / file).read_text())
