"""The LLM proposer: OpenAI-compatible chat-completions endpoints, weighted model ensembles.

``client`` speaks the wire protocol (retries with backoff and jitter, Retry-After, a hard deadline
per proposal, per-model concurrency limits); ``breaker`` pauses a model that keeps failing;
``ensemble`` picks the model of each proposal (fixed weights, or a bandit that favours the models
whose children improve most per unit of cost); ``prices`` holds the built-in price table; and
``proposer`` ties them into a :class:`~codevolve.proposers.base.Proposer`.

No network I/O happens at import or construction: the caller (a composition root in ``services``)
owns the ``httpx.AsyncClient`` and closes it.
"""
