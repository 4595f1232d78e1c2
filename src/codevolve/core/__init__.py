"""The vocabulary of codevolve as frozen, typed values. No I/O lives here.

Every other package imports from ``core``; ``core`` imports nothing of the project.
"""
