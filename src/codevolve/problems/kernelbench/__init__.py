"""KernelBench-format problems: a user's PyTorch Model file, a ModelNew evolved against it."""
