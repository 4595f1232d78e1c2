"""gemm-kernel-gpu's device code: the judge of a candidate's kernel module (kernel_judge.py,
kernel_timing.py, kernel_bench.py), its device job (kernel_jobs.py) and the runner role that
runs the candidate in its cage (kernel_role.py, kernel_loader.py).

Imported only in a device process, in runners and in tests (needs torch).
"""
