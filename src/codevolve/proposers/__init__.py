"""Proposers: given a prompt, return SEARCH/REPLACE text (or a full rewrite) for a child program.

``base`` holds the :class:`~codevolve.proposers.base.Proposer` protocol, ``simulated`` the
deterministic proposer built on mutations, ``generic`` the mutations that fit any Python program and
``source_edit`` the line-level hunk building they share. Errors derive from
:class:`~codevolve.proposers.errors.ProposerError`.
"""
