"""A small end-to-end run on the embedded default: SQLite, in-process workers, simulated
proposer."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from codevolve.core.config import RunConfig
from codevolve.services.cli import main
from codevolve.services.runtime.embedded import run_embedded

REPORT_KEYS = {
    "job_id",
    "proposals",
    "evaluated",
    "failed",
    "rejected",
    "wall_s",
    "best_program_id",
    "train",
    "test",
}
SPLIT_KEYS = {"expert", "lookup", "evolved", "oracle", "evolved_over_oracle"}


async def test_small_run_improves_on_the_initial_program_and_accounts_for_every_proposal(
    tmp_path: Path,
) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 'run.sqlite'}"
    config = RunConfig(problem="gemm-tiling", seed=3, max_proposals=120, islands=2)
    result = await run_embedded(db_url=db, config=config, workers=2)

    report = result.report
    assert result.state.value == "done"
    assert report.keys() >= REPORT_KEYS
    assert report["train"].keys() >= SPLIT_KEYS and report["test"].keys() >= SPLIT_KEYS
    assert report["proposals"] == 120
    made = report["evaluated"] + report["rejected"] + report["failed"] + report["pending"]
    # every proposal is a child, a failed apply or a duplicate; the seed program is extra
    assert (
        made - 1 + report["apply_failed"] + report["duplicates"] + report["proposer_failed"] == 120
    )
    assert report["pending"] == 0
    assert report["train"]["evolved"] > 1.0  # better than the expert it started from
    # The score counts the validation shapes too; the train row is the 44 train shapes alone.
    assert report["train"]["evolved"] != pytest.approx(report["best_score"], abs=1e-9)
    assert report["train"]["evolved"] <= report["train"]["oracle"] + 1e-9
    assert 0 < report["test"]["evolved_over_oracle"] <= 1.0 + 1e-9
    # The best was confirmed on independent samples. The cost model is deterministic, so the
    # confirmed figure is the picked one; its spread is over the per-shape speedups.
    assert report["remeasured"].get("confirmed", 0) >= 1
    assert report["best_score"] == pytest.approx(report["best_picked_score"])
    assert report["best_spread_over"] == "cases" and report["best_spread"]["count"] > 1
    assert report["best_spread"]["geomean"] == pytest.approx(report["best_score"], rel=1e-9)


def test_cli_run_writes_the_report_and_best_prints_the_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "cli.sqlite")
    report_path = tmp_path / "report.json"
    code = main(
        [
            "run",
            "gemm-tiling",
            "--proposals",
            "30",
            "--seed",
            "1",
            "--db",
            db,
            "--report",
            str(report_path),
            "--quiet",
        ]
    )
    assert code == 0
    report = json.loads(report_path.read_text())
    assert report["proposals"] == 30
    # Every return of the simulated proposer's programs is a literal config: proven, not swept.
    legality = report["best_legality"]
    assert legality["proven"] is True and legality["inputs"] > 400, legality
    assert legality["text"].startswith("proven for every input (every return is a literal")
    assert f"its legality: {legality['text']}" in " ".join(capsys.readouterr().out.split())
    assert main(["best", report["job_id"], "--db", db]) == 0
    printed = capsys.readouterr().out
    with sqlite3.connect(tmp_path / "cli.sqlite") as conn:
        # The job's best is the confirmed one; `best` prints its source, not the picked best's.
        (source, verdict) = conn.execute(
            "select source, verdict from programs where id = ?", (report["best_program_id"],)
        ).fetchone()
    assert verdict == "confirmed"
    assert printed == source
    assert main(["show", report["best_program_id"], "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["legality"] == legality
    assert main(["show", report["best_program_id"], "--db", db]) == 0
    assert "proven for every input" in " ".join(capsys.readouterr().out.split())
    assert main(["status", report["job_id"], "--db", db, "--json"]) == 0
    with sqlite3.connect(tmp_path / "cli.sqlite") as conn:
        (states,) = conn.execute("select count(*) from jobs where state = 'done'").fetchone()
    assert states == 1


def test_cli_rejects_an_unknown_problem_and_lists_the_known_ones(
    tmp_path: Path, capsys: object
) -> None:
    code = main(
        [
            "run",
            "no-such-problem",
            "--proposals",
            "5",
            "--db",
            str(tmp_path / "x.sqlite"),
            "--quiet",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "gemm-tiling" in err


async def test_a_run_with_one_proposal_in_flight_is_reproducible_from_its_seed(
    tmp_path: Path,
) -> None:
    histories = []
    for attempt in range(2):
        db = tmp_path / f"rep{attempt}.sqlite"
        config = RunConfig(problem="gemm-tiling", seed=11, max_proposals=30, max_in_flight=1)
        await run_embedded(db_url=f"sqlite+aiosqlite:///{db}", config=config, workers=2)
        with sqlite3.connect(db) as conn:
            histories.append(
                conn.execute(
                    "select proposal_index, content_hash, status, score from programs"
                    " order by proposal_index"
                ).fetchall()
            )
    assert len(histories[0]) > 10
    assert histories[0] == histories[1]
