"""API keys written in ``config.yaml``: taken out before the bundle is stored, never kept.

OpenEvolve reads ``llm.api_key`` (and ``llm.models[i].api_key``) from its config, either as the key
itself or as ``${VARIABLE}``, a reference to an environment variable. A bundle is stored in the
database and unpacked in every sandbox, so a key written there must not travel with it: each
literal key is replaced in the text by a reference to a variable named here (``${VARIABLE}``), and
the process that read the folder holds the key under that name (:func:`literal_keys`). The job's
config then names only the variable (``ModelConfig.api_key_env``).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

SHARED_KEY_ENV = "CODEVOLVE_LLM_API_KEY"  # holds llm.api_key
MODEL_KEY_ENV = "CODEVOLVE_LLM_API_KEY_{index}"  # holds llm.models[index].api_key
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def reference(value: str) -> str | None:
    """The variable a ``${VARIABLE}`` value names; None for any other text."""
    found = _REFERENCE.match(value.strip())
    return found.group(1) if found else None


def literal_variable(where: str) -> str:
    """The variable that holds the key written at ``where`` (``"llm."``, ``"llm.models[2]."``)."""
    found = re.fullmatch(r"llm\.models\[(\d+)\]\.", where)
    return MODEL_KEY_ENV.format(index=found.group(1)) if found else SHARED_KEY_ENV


def literal_keys(text: str) -> dict[str, str]:
    """Variable name -> key, for each key written out in ``config.yaml``'s text; a text that is
    not YAML, or has no ``llm`` mapping, has none."""
    try:
        raw = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        return {}
    llm = raw.get("llm") if isinstance(raw, dict) else None
    if not isinstance(llm, dict):
        return {}
    keys: dict[str, str] = {}
    _literal(keys, SHARED_KEY_ENV, llm.get("api_key"))
    models = llm.get("models")
    for index, model in enumerate(models if isinstance(models, list) else []):
        if isinstance(model, dict):
            _literal(keys, MODEL_KEY_ENV.format(index=index), model.get("api_key"))
    return keys


def _literal(keys: dict[str, str], name: str, value: Any) -> None:
    if isinstance(value, str) and value.strip() and reference(value) is None:
        keys[name] = value


def without_keys(text: str) -> str:
    """``config.yaml``'s text with each literal key replaced by a reference to its variable.

    The replacement is textual (comments and layout stay), and every occurrence goes, a copy in
    a comment included. A key is at least a few characters long; one shorter than that (a
    placeholder such as ``"x"``) is replaced only where it is the whole value."""
    for name, key in literal_keys(text).items():
        if len(key) >= 8:
            text = text.replace(key, f"${{{name}}}")
        else:
            pattern = rf"(api_key\s*:\s*)(['\"]?){re.escape(key)}\2(\s*(#.*)?)$"
            text = re.sub(pattern, rf"\g<1>\g<2>${{{name}}}\g<2>\g<3>", text, flags=re.M)
    return text
