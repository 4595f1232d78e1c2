"""Proposal processes: the same proposals as in the controller's own process, whatever happens
to the processes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from codevolve.core.config import RunConfig
from codevolve.core.diff import Applied, ApplyFailure, ApplyFailureKind
from codevolve.core.program import CaseResult
from codevolve.core.prompt import BestCase, ProgramView, Prompt, Proposal
from codevolve.evaluator_workers.local_queue import LocalQueue
from codevolve.program_db import repository
from codevolve.program_db.engine import create_engine, session_factory
from codevolve.prompt_sampler.builder import build_prompt
from codevolve.services.controller.proposal_pool import ProposalPool, Settled, _dumps, settle
from codevolve.services.runtime.embedded import make_proposer
from codevolve.services.runtime.problems import cached_problem
from tests.unit.services.controller.controller_support import run_job

PROBLEM = "gemm-tiling"
MAX_CODE_LENGTH = 100_000


def _prompt(index: int) -> Prompt:
    problem = cached_problem(PROBLEM)
    parent = ProgramView(id="p", source=problem.initial_program, score=0.5)
    return build_prompt(
        job_id="j",
        problem=PROBLEM,
        context=problem.description,
        proposal_index=index,
        island=0,
        parent=parent,
        inspirations=[],
        best_cases={},
        rng=np.random.default_rng([7, index]),
        render=False,
    )


def _proposer() -> object:
    config = RunConfig(problem=PROBLEM)
    return make_proposer(config, cached_problem(PROBLEM))


async def _in_process(count: int) -> list[tuple[Settled, object]]:
    proposer = _proposer()
    out = []
    for index in range(count):
        rng = np.random.default_rng([1, index])
        settled = await settle(proposer, _prompt(index), rng, max_code_length=MAX_CODE_LENGTH)  # type: ignore[arg-type]
        out.append((settled, rng.bit_generator.state))
    return out


async def test_a_pool_settles_proposals_as_the_controller_would_itself() -> None:
    expected = await _in_process(40)
    async with ProposalPool(_proposer(), processes=2, max_code_length=MAX_CODE_LENGTH) as pool:  # type: ignore[arg-type]
        assert len(pool.pids) == 2
        rngs = [np.random.default_rng([1, index]) for index in range(40)]
        got = await asyncio.gather(*(pool.settle(_prompt(i), rngs[i]) for i in range(40)))
    assert [settled for settled, _state in expected] == got
    assert [state for _settled, state in expected] == [rng.bit_generator.state for rng in rngs]
    assert sum(settled.outcome is not None for settled in got) > 30  # most answers apply


async def test_proposals_of_a_killed_process_are_made_here_with_the_same_result() -> None:
    expected = await _in_process(12)
    async with ProposalPool(_proposer(), processes=2, max_code_length=MAX_CODE_LENGTH) as pool:  # type: ignore[arg-type]
        first = await pool.settle(_prompt(0), np.random.default_rng([1, 0]))
        os.kill(pool.pids[0], signal.SIGKILL)
        got = [first]
        for index in range(1, 12):
            got.append(await pool.settle(_prompt(index), np.random.default_rng([1, index])))
        assert len(pool.pids) == 1
    assert [settled for settled, _state in expected] == got


async def test_a_proposer_that_raises_in_a_process_raises_in_the_controller() -> None:
    class Broken:
        name = "broken"
        reads_prompt_text = False
        cpu_bound = True

        async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal:
            raise KeyError("no such mutation")

    async with ProposalPool(Broken(), processes=1, max_code_length=MAX_CODE_LENGTH) as pool:
        with pytest.raises(RuntimeError, match="KeyError: 'no such mutation'"):
            await pool.settle(_prompt(0), np.random.default_rng(0))
        assert len(pool.pids) == 1  # the process goes on serving


def test_a_proposer_that_calls_out_cannot_go_to_processes() -> None:
    class Remote:
        name = "remote"
        reads_prompt_text = True
        cpu_bound = False

        async def propose(self, prompt: Prompt, rng: np.random.Generator) -> Proposal:
            raise AssertionError

    with pytest.raises(ValueError, match="not cpu_bound"):
        ProposalPool(Remote(), processes=2, max_code_length=MAX_CODE_LENGTH)


async def test_processes_exit_with_the_pool() -> None:
    async with ProposalPool(_proposer(), processes=2, max_code_length=MAX_CODE_LENGTH) as pool:  # type: ignore[arg-type]
        pids = pool.pids
    assert not any(_alive(pid) for pid in pids)  # exited (a zombie counts as exited)


def test_processes_exit_when_the_controller_is_killed() -> None:
    script = textwrap.dedent(
        """
        import asyncio
        from tests.unit.services.controller.test_proposal_pool import _proposer
        from codevolve.services.controller.proposal_pool import ProposalPool

        async def main():
            async with ProposalPool(_proposer(), processes=2, max_code_length=10) as pool:
                print(*pool.pids, flush=True)
                await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    ) as controller:
        assert controller.stdout is not None
        pids = [int(pid) for pid in controller.stdout.readline().split()]
        assert len(pids) == 2
        assert all(_alive(pid) for pid in pids)
        controller.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


async def test_a_job_makes_the_same_programs_with_proposal_processes(tmp_path: Path) -> None:
    config = RunConfig(problem=PROBLEM, max_proposals=30, max_in_flight=1, seed=3)
    runs = []
    for processes in (0, 2):
        folder = tmp_path / str(processes)
        folder.mkdir()
        state, counts, controller = await run_job(
            folder, LocalQueue(), config, proposal_processes=processes
        )
        engine = create_engine(f"sqlite+aiosqlite:///{folder / 'run.sqlite'}")
        try:
            async with session_factory(engine)() as session:
                programs = await repository.list_programs(
                    session, controller.job.id, limit=100, order="index"
                )
        finally:
            await engine.dispose()
        runs.append(
            (state, counts, [(p.proposal_index, p.content_hash, p.score) for p in programs])
        )
    assert runs[0] == runs[1]
    assert runs[0][1].evaluated > 10


def test_messages_pickle_to_equal_values_with_the_fast_reducers() -> None:
    case = CaseResult(key="64x64x64", cost=12.5, detail="tile 32")
    view = ProgramView(
        id="p1",
        source="x = 1\n",
        score=float("inf"),
        metrics={"speedup": 1.5},
        cases=(case,),
        feedback="ok",
        error="boom",
        stderr="tail",
    )
    prompt = Prompt(
        job_id="j",
        problem="gemm-tiling",
        proposal_index=3,
        island=1,
        parent=view,
        inspirations=(view, dataclasses.replace(view, id="p2", score=None)),
        best_cases={"64x64x64": BestCase(key="64x64x64", cost=1.0, detail="", program_id="p1")},
        context="c",
        text="t",
        variant="task0-a",
    )
    proposal = Proposal(text="answer", proposer="simulated:x", tokens_in=3, cost_usd=0.5)
    messages = [
        (1, (prompt, np.random.default_rng(4).bit_generator.state)),
        Settled(
            proposal=proposal, outcome=Applied("y = 2\n", "diff", False), content_hash="h", seed=9
        ),
        Settled(
            proposal=proposal,
            outcome=ApplyFailure(ApplyFailureKind.NO_MATCH, "no match", hunk_index=0),
            content_hash="",
            seed=0,
        ),
    ]
    for message in messages:
        fast = _dumps(message)
        assert pickle.loads(fast) == message
        assert fast != pickle.dumps(message, pickle.HIGHEST_PROTOCOL)  # the reducers were used
