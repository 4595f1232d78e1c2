"""gemm-tiling-gpu evolved with the mutations reading every case of the parent (the cost model's
and the GPU's), as they did before :func:`measured_view` narrowed them to the GPU's: the ablation
behind docs/results-gpu.md.

    python bench/gpu_evolve_ablation.py run gemm-tiling-gpu [codevolve run options]

Same command line as ``codevolve``; only the proposer's view of the parent's cases differs.
"""

from __future__ import annotations

import sys

from codevolve.core.prompt import Prompt
from codevolve.problems.gemm_tiling_gpu import problem
from codevolve.services.cli import main


def every_case(prompt: Prompt) -> Prompt:
    return prompt


if __name__ == "__main__":
    problem.measured_view = every_case  # MeasuredCasesMutation looks it up at each proposal
    sys.exit(main(sys.argv[1:]))
