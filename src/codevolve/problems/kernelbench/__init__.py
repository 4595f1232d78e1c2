"""KernelBench-format problems: a user's PyTorch Model file, a ModelNew evolved against it.

The plug-in is a format: its problems are the files users bring (``run --kernel-problem``,
``codevolve kernelbench``), stored as bundles, so it names no problem to run. It gives their jobs
the judge's device job (which runs on a CPU too) and the export of the best ``ModelNew`` with
its reference and a test comparing the two.
"""

from __future__ import annotations

from codevolve.core.export import Exported, Exporter, ExportRecords
from codevolve.core.plugin import DeviceJob, ProblemPlugin

NAME = "kernelbench"


async def _export(records: ExportRecords, file: str) -> Exported:
    from codevolve.problems.kernelbench.export import export_model

    return await export_model(records, file)


PLUGIN = ProblemPlugin(
    name=NAME,
    label="KernelBench",
    device_jobs=(DeviceJob("kb.judge", f"{__name__}.device.kb_jobs:judge_job", cpu=True),),
    exporters=(Exporter("module", _export, default_file="model_new.py"),),
)
