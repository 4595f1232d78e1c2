"""Composition of runs and processes: the embedded run (:mod:`.embedded`), the server's job
supervisor, worker processes, the LLM proposer's client, and where problems are looked up
(built-in names and stored bundles)."""
