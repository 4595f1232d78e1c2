"""gemm-tiling-gpu's device code: the trusted Triton GEMM, timed with each config against
cuBLAS (gemm_bench.py, kernel.py), and its device jobs (gemm_jobs.py).

Imported only in a device process and in tests: the modules need torch and Triton.
"""
