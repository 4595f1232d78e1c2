"""Per-shape report of one program: what ``codevolve evaluate --problem gemm-tiling`` prints
(the plug-in's per-case report, core/plugin.py: CaseReport).

The candidate's ``choose_config`` runs in the sandbox (through the :class:`Candidate` handle) and
returns plain values; validation, launchability and the cost model run here, in trusted code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from codevolve.core.problem import Candidate
from codevolve.problems.gemm_tiling.baselines import (
    expert_config,
    geomean,
    oracle_config,
    score_configs,
)
from codevolve.problems.gemm_tiling.errors import GemmTilingError
from codevolve.problems.gemm_tiling.shapes import (
    GemmShape,
    all_shapes,
    seen_test_shapes,
    train_shapes,
    unseen_shapes,
    validation_shapes,
)
from codevolve.problems.gemm_tiling.space import validate

ENTRY_POINT = "choose_config"
# M regimes (docs/gemm_tiling.md): decode reads the weights, prefill is compute bound.
REGIMES = (("decode", 1, 16), ("mid", 17, 512), ("prefill", 513, 1 << 31))


def parse_shapes(data: object) -> list[GemmShape]:
    """A JSON list of [M, N, K] (positive ints) as shapes; grid shapes keep their projection."""
    if not isinstance(data, list) or not data:
        raise GemmTilingError("shapes: expected a non-empty JSON list of [M, N, K]")
    known = {(s.m, s.n, s.k): s for s in all_shapes()}
    shapes = []
    for i, item in enumerate(data):
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in item)
        ):
            raise GemmTilingError(f"shapes[{i}]: expected [M, N, K] of positive ints, got {item!r}")
        m, n, k = item
        shapes.append(known.get((m, n, k), GemmShape(m, n, k)))
    return shapes


def shape_report(candidate: Candidate, shapes: Sequence[GemmShape] | None = None) -> dict[str, Any]:
    """Chosen config, time, oracle time and launchability per shape, plus geomeans.

    ``evolved_over_oracle`` is the geomean of oracle_time / time over the shapes (0 when any shape
    gets an invalid or unlaunchable config); ``expert_over_oracle`` the same for the expert rule.
    """
    shapes = list(shapes) if shapes is not None else list(all_shapes())
    reply = candidate.call(ENTRY_POINT, [list(s.args) for s in shapes])
    if not reply.ok or reply.values is None:
        return {"error": f"{reply.error_kind}: {reply.error}", "shapes": []}
    splits = {
        **dict.fromkeys(train_shapes(), "train"),
        **dict.fromkeys(validation_shapes(), "validation"),
        **dict.fromkeys(seen_test_shapes(), "seen test"),
        **dict.fromkeys(unseen_shapes(), "unseen test"),
    }
    rows: list[dict[str, Any]] = []
    ratios: list[float] = []
    expert_ratios: list[float] = []
    for shape, value in zip(shapes, reply.values, strict=True):
        expert = score_configs([shape], [expert_config(shape.m, shape.n, shape.k)])[0]
        expert_ratios.append(expert.over_oracle)
        row: dict[str, Any] = {
            "M": shape.m,
            "N": shape.n,
            "K": shape.k,
            "projection": shape.projection,
            "split": splits.get(shape, "other"),
            "oracle_time_us": expert.oracle_time_us,
            "oracle_config": list(oracle_config(shape).as_tuple()),
            "expert_config": list(expert.config.as_tuple()),
            "expert_time_us": expert.time_us,
        }
        config = validate(value)
        if isinstance(config, str):
            row.update(config=value, launchable=False, time_us=None, error=config)
            ratios.append(0.0)
        else:
            score = score_configs([shape], [config])[0]
            row.update(
                config=list(config.as_tuple()),
                launchable=score.launchable,
                time_us=score.time_us if score.launchable else None,
                over_oracle=score.over_oracle if score.launchable else 0.0,
            )
            if not score.launchable:
                row["error"] = config.launch_problem()
            ratios.append(score.over_oracle if score.launchable else 0.0)
        rows.append(row)
    return {
        "shapes": rows,
        "evolved_over_oracle": geomean(ratios),
        "expert_over_oracle": geomean(expert_ratios),
        "speedup_over_expert": geomean(ratios) / geomean(expert_ratios),
        "launchable": sum(1 for r in rows if r["launchable"]),
        "count": len(rows),
    }


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    """The report of :func:`shape_report` in a few lines: one per M regime, then all shapes."""
    rows: Sequence[dict[str, Any]] = result["shapes"]
    if not rows:
        error = result.get("error")
        return [f"shapes: not scored ({_one_line(error)})"] if error else []
    lines = ["time of the best config (oracle) / time chosen, geomean; 1.0 is the oracle:"]
    for name, low, high in REGIMES:
        chosen = [row for row in rows if low <= row["M"] <= high]
        if chosen:
            lines.append(f"  {_regime_line(name, chosen)}")
    lines.append(
        f"  all: {result['count']} shapes, {result['launchable']} launchable, "
        f"evolved {result['evolved_over_oracle']:.3f}, expert {result['expert_over_oracle']:.3f}, "
        f"speedup over expert {result['speedup_over_expert']:.3f}"
    )
    return lines


def _regime_line(name: str, rows: Sequence[dict[str, Any]]) -> str:
    evolved = geomean([row.get("over_oracle", 0.0) for row in rows])
    expert = geomean([row["oracle_time_us"] / row["expert_time_us"] for row in rows])
    launchable = sum(1 for row in rows if row["launchable"])
    ms = sorted({row["M"] for row in rows})
    return (
        f"{name} (M {ms[0]}-{ms[-1]}): {len(rows)} shapes, {launchable} launchable, "
        f"evolved {evolved:.3f}, expert {expert:.3f}"
    )


def _one_line(text: str) -> str:
    """An error as one line: its first, or a traceback's last (the exception), spaces folded."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    traceback = "Traceback" in lines[0] or 'File "' in lines[0]
    return " ".join((lines[-1] if traceback else lines[0]).split())
