"""How far a TF32 convolution lies from the exact one, at the KernelBench judge's tolerance.

torch's default lets cuDNN round an fp32 convolution's inputs to TF32 (10 mantissa bits). This
emulates that on the CPU, for the settings of KernelBench's Level-1 2-D convolutions (their
channels, kernels, strides, paddings and dilations; smaller images and batches): inputs and
weights rounded to TF32 (round to nearest), products summed in fp64. Each result is compared
with the exact convolution (fp64 of the fp32 values) by the judge's own comparison
(``kb_compare.compare``: atol = rtol = 1e-4, atol scaled by the output's RMS on signed and wide
inputs) on the judge's three input distributions; an fp32 convolution (torch's, on the CPU) is
compared the same way beside it. One line per case and distribution:

    50 kernelbench  tf32: output: 18213 of 101568 elements wrong (max abs error ...)  fp32: right

    python bench/kb_tf32_error.py

docs/kernelbench.md quotes it for the judge's choice to compute fp32 in fp32 (kb_precision.py).
"""

from __future__ import annotations

import re
import sys

import torch
import torch.nn.functional as F

from codevolve.problems.kernelbench.device.kb_compare import compare

# problem: (in, out, kernel, stride, padding, dilation, groups, input side) as in Level 1, the
# sides smaller
CASES = {
    "50": (3, 96, (11, 11), 4, 2, 1, 1, 96),
    "55": (64, 128, (3, 3), 1, 0, 1, 1, 40),
    "56": (64, 128, (5, 7), 1, 0, 1, 1, 40),
    "62": (32, 64, (5, 9), 1, 0, 1, 1, 48),
    "63": (16, 128, (3, 3), 1, 0, 1, 1, 48),
    "80": (32, 64, (5, 9), 1, (2, 4), (2, 3), 1, 48),
    "82": (64, 64, (3, 3), 1, 0, 1, 64, 48),
    "87": (64, 128, (1, 1), 1, 0, 1, 1, 48),
}
BATCH = 2


def tf32(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to TF32 (10 of fp32's 23 mantissa bits, to nearest), still fp32."""
    bits = t.float().contiguous().view(torch.int32)
    return ((bits + (1 << 12)) & ~((1 << 13) - 1)).view(torch.float32)


def main() -> int:
    torch.manual_seed(0)
    print("# problem distribution  TF32 convolution vs exact | fp32 convolution vs exact")
    worst = 0.0
    for name, (c_in, c_out, kernel, stride, padding, dilation, groups, side) in CASES.items():
        conv = torch.nn.Conv2d(c_in, c_out, kernel, stride, padding, dilation, groups)
        w, b = conv.weight.detach(), conv.bias.detach()
        settings = (stride, padding, dilation, groups)
        for distribution in ("kernelbench", "signed", "wide"):
            x = torch.rand(BATCH, c_in, side, side)
            if distribution != "kernelbench":
                scale = 100.0 if distribution == "wide" else 1.0
                x = x * torch.where(torch.rand(x.shape) < 0.5, -scale, scale)
            exact = F.conv2d(x.double(), w.double(), b.double(), *settings).float()
            rounded = F.conv2d(tf32(x).double(), tf32(w).double(), b.double(), *settings).float()
            scaled = distribution != "kernelbench"
            tf32_says = compare(rounded, exact, None, scaled=scaled).problem or "right"
            fp32 = F.conv2d(x, w, b, *settings)
            fp32_says = compare(fp32, exact, None, scaled=scaled).problem or "right"
            counted = re.search(r"(\d+) of \d+ elements wrong", tf32_says)
            worst = max(worst, int(counted.group(1)) / exact.numel() if counted else 0.0)
            print(f"{name} {distribution:11s}  tf32: {tf32_says}  fp32: {fp32_says}")
    print(f"# the largest share of a TF32 convolution's elements judged wrong: {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
