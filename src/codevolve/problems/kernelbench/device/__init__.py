"""KernelBench's device code: the judge of a ``ModelNew`` against its reference (kb_judge.py
and the modules it names), its device job (kb_jobs.py) and the runner role that runs a program
in its cage (kb_role.py).

Imported only in a device process, in runners and in tests (needs torch).
"""
