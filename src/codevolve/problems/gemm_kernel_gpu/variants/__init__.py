"""Kernel variants a dispatch rule can launch, as source text (kernel_source.py inserts them)."""
