"""The precision of fp32 in every KernelBench process: fp32 computes in fp32.

torch's defaults differ by library. A product of fp32 tensors on cuBLAS computes in fp32
(``torch.backends.cuda.matmul.allow_tf32`` is False), but a convolution on cuDNN may round its
inputs to TF32, 10 mantissa bits (``torch.backends.cudnn.allow_tf32`` is True). Held to the
judge's fp32 tolerance (atol = rtol = 1e-4), a TF32 convolution is itself wrong: on KernelBench's
convolution shapes about a sixth of its elements lie outside 1e-4 of the exact result, and a
candidate that computes exactly in fp32 would be judged wrong against it. So the judge's process
(the reference it checks against) and every runner (the candidate's, and the reference's that
is timed as the eager baseline) switch TF32 off before a program runs: the reference, the
candidate and the baseline compute fp32 in fp32, and a candidate's own process cannot switch it
back on for itself (the source rules refuse ``torch.backends`` but for cuDNN's algorithm search).

Imported only in the device process, in runners and in tests (needs torch).
"""

from __future__ import annotations

import torch


def fp32_in_fp32() -> None:
    """Switch TF32 off for this process's cuBLAS products and cuDNN convolutions."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
