"""Evaluator workers: the queue protocols, the worker loop, the cascade runner and the sandbox.

Keep this file free of imports: the sandbox fork server runs as a module of this package and must
import nothing but the standard library before it forks candidates.
"""
