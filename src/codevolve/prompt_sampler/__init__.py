"""Prompts for proposers and the SEARCH/REPLACE answer format they reply in.

``builder`` renders a :class:`~codevolve.core.prompt.Prompt` from a parent, inspirations and the
best costs a job has seen; ``search_replace`` reads an answer and applies it to the parent,
confined to the parent's EVOLVE-BLOCK regions (:mod:`codevolve.core.evolve_block`). A failure to
apply is a value (:class:`~codevolve.core.diff.ApplyFailure`), never an exception.
"""
