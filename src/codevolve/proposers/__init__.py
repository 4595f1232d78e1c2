"""Proposers: given a prompt, return SEARCH/REPLACE text (or a full rewrite) for a child program.

``base`` holds the :class:`~codevolve.proposers.base.Proposer` protocol, ``simulated`` the
deterministic proposer built on mutations, ``generic`` the mutations that fit any Python program
(they keep to the EVOLVE-BLOCK layout of :mod:`codevolve.core.evolve_block` and build their hunks
with :func:`codevolve.core.diff.unique_line_hunk`, as problems' domain mutations do) and ``llm``
the OpenAI-compatible client and its ensembles. Errors derive from
:class:`~codevolve.proposers.errors.ProposerError`.
"""
