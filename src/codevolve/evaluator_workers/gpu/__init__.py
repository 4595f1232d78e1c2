"""GPU evaluator workers: a device held by a worker, and the trusted GEMM kernel timed on it.

Nothing here imports torch or Triton at import time: the modules that need them
(:mod:`.kernel`, :mod:`.gemm_bench`, :mod:`.gemm_jobs`) are imported inside the device process
only, so CPU-only workers and CI never need either.
"""
