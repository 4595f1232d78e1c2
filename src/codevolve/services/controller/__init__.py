"""The evolution controller: the loop (:mod:`.loop`) and its collaborators, each a module of its
own: the parent cache (:mod:`.parents`), island maintenance (:mod:`.islands`), proposal
processes (:mod:`.proposal_pool`), batched proposal writes (:mod:`.proposal_writes`), the
programs in flight (:mod:`.flights`), result application (:mod:`.results`), the proposal log
(:mod:`.proposal_ledger`), winners' re-measures (:mod:`.remeasures`, :mod:`.confirmation`) and
the live counters (:mod:`.progress`). The database is reached through
:class:`codevolve.program_db.job_store.JobStore` only."""
