"""Every Redis key, stream and consumer-group name codevolve uses, in one place.

All keys share a prefix (``codevolve`` by default) so that several deployments, or tests running
side by side, can share one Redis server without touching each other's keys.

``P:tasks:<capability>``   stream  tasks for workers of that capability (cpu, gpu); group
                                   ``workers``
``P:results:<job>``        stream  evaluations of one job; group ``controller``
``P:dead``                 stream  tasks delivered too often without a result, and why
``P:incarnation:<job>``    string  set by the job's controller; its absence means Redis lost
                                   its data (flush, restart) and pending tasks must be resent
``P:workers``              set     names of workers that sent a heartbeat
``P:worker:<name>``        hash    a worker's capabilities and last heartbeat (expires)
``P:bundle:<sha256>``      hash    an uploaded problem's files: path -> base64 of the bytes
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "codevolve"
TASK_GROUP = "workers"  # consumer group of every task stream
RESULT_GROUP = "controller"  # consumer group of every results stream
RESULT_CONSUMER = "controller"  # one controller per job, so one fixed consumer name
DEFAULT_CAPABILITY = "cpu"
CAPABILITIES = ("cpu", "gpu")


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """The key names under one prefix."""

    prefix: str = DEFAULT_PREFIX

    def tasks(self, capability: str) -> str:
        return f"{self.prefix}:tasks:{capability}"

    def results(self, job_id: str) -> str:
        return f"{self.prefix}:results:{job_id}"

    def dead_letters(self) -> str:
        return f"{self.prefix}:dead"

    def incarnation(self, job_id: str) -> str:
        return f"{self.prefix}:incarnation:{job_id}"

    def workers(self) -> str:
        return f"{self.prefix}:workers"

    def worker(self, name: str) -> str:
        return f"{self.prefix}:worker:{name}"

    def bundle(self, bundle_id: str) -> str:
        return f"{self.prefix}:bundle:{bundle_id}"
