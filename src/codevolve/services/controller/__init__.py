"""The evolution controller: the loop (:mod:`.loop`) and what it works with: proposal
processes (:mod:`.proposal_pool`), the proposal log (:mod:`.proposal_ledger`) and winners'
re-measures (:mod:`.remeasures`)."""
