"""An OpenEvolve folder whose config names no feature dimensions gets OpenEvolve's default grid
(complexity and diversity): its programs spread over several cells of an island, and prompts show
other programs beside the parent."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from codevolve.core.similarity import code_tokens, similarity
from codevolve.problems.openevolve import load_folder
from codevolve.services.run_config import bundle_run_config
from codevolve.services.runtime.embedded import run_embedded

INITIAL = """\
import math


# EVOLVE-BLOCK-START
def weights(n):
    scale = 0.5
    offset = 1.5
    values = []
    for i in range(n):
        values.append(scale * i + offset)
    if n > 3:
        values[0] = values[0] * 2.0
    return values
# EVOLVE-BLOCK-END


def total():
    return sum(math.sqrt(abs(v)) for v in weights(8))
"""
EVALUATOR = """\
import importlib.util


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"combined_score": -abs(module.total() - 20.0)}
"""
CONFIG = """\
random_seed: 3
database:
  num_islands: 1
"""


@pytest.mark.slow
async def test_programs_spread_over_cells_and_prompts_show_other_programs(tmp_path: Path) -> None:
    folder = tmp_path / "problem"
    folder.mkdir()
    (folder / "initial_program.py").write_text(INITIAL)
    (folder / "evaluator.py").write_text(EVALUATOR)
    (folder / "config.yaml").write_text(CONFIG)
    config, _ = bundle_run_config(
        load_folder(folder), {"proposals": 80}, fields={"proposer": {"log_prompts": True}}
    )
    db = tmp_path / "run.sqlite"
    result = await run_embedded(db_url=f"sqlite+aiosqlite:///{db}", config=config, workers=2)

    assert result.state.value == "done"
    with sqlite3.connect(db) as conn:
        cells = [cell for (cell,) in conn.execute("select cell from elites where island = 0")]
        prompts = [
            text for (text,) in conn.execute("select prompt from proposals order by proposal_index")
        ]
    assert len(cells) >= 4, cells  # one cell per program before: the island held one elite
    shown = [text for text in prompts if "## Other programs for inspiration" in text]
    assert len(shown) >= len(prompts) // 2


@pytest.mark.slow
async def test_near_duplicate_children_are_not_evaluated(tmp_path: Path) -> None:
    folder = tmp_path / "problem"
    folder.mkdir()
    (folder / "initial_program.py").write_text(INITIAL)
    (folder / "evaluator.py").write_text(EVALUATOR)
    (folder / "config.yaml").write_text(CONFIG + "  similarity_threshold: 0.97\n")
    config, _ = bundle_run_config(load_folder(folder), {"proposals": 40})
    assert config.novelty_threshold == 0.97
    db = tmp_path / "run.sqlite"
    result = await run_embedded(db_url=f"sqlite+aiosqlite:///{db}", config=config, workers=2)

    assert result.state.value == "done"
    with sqlite3.connect(db) as conn:
        filtered = conn.execute(
            "select reason from proposals where status = 'too_similar'"
        ).fetchall()
        pairs = conn.execute(
            "select c.source, p.source from programs c join programs p on c.parent_id = p.id"
        ).fetchall()
    assert filtered and all("novelty_threshold 0.97" in reason for (reason,) in filtered)
    assert pairs  # children were still made, and none is a near-duplicate of its parent
    assert all(similarity(code_tokens(c), code_tokens(p)) < 0.97 for c, p in pairs)
