"""Sandbox seconds on the operator's own clock: how long a call's tool may have run.

Kubernetes records a container's start and finish to the second, so a quick call measured
by them meters 0, and a Job killed at its deadline loses its pod and with it both times:
the most expensive calls metered nothing. The operator measures instead, with a monotonic
clock, from when the tool may start to when the operator saw its end:

- a Job: from the first state of the Job that shows its pod Ready, or of the pod that
  shows the tool's container started (the network gate passed, or, where the gate runs in
  the tool's container, about to); when the Job ended before the operator saw it Ready
  (a quick call), from the last state it saw before the end, so the span holds the whole
  run (an upper bound, never 0);
- a warm pod (a pool's, an attempt's workspace): from the moment the exec began.

The span is rounded to a millisecond, and a tool that started is metered at least one
(`MIN_SECONDS`). The value is computed once, when the executor settles, and status, the
receipt's `usage` and `tooladapter_sandbox_seconds_total` all read that one value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tooladapter.kube.sandbox import job_finished, job_running, pod_ended, pod_started

#: The meter's resolution, and what a tool that started is metered at least.
MIN_SECONDS = 0.001

Clock = Callable[[], float]


def metered(seconds: float) -> float:
    """A span as metered: milliseconds, never below `MIN_SECONDS`."""
    return max(round(seconds, 3), MIN_SECONDS)


@dataclass
class JobRunClock:
    """The operator's sightings of one Job, on `clock` (monotonic seconds)."""

    clock: Clock = time.monotonic
    #: When the operator first saw the pod Ready (the tool running).
    running: float | None = None
    #: The last sighting before that which showed neither Ready nor an end.
    quiet: float | None = None
    #: When the operator saw the Job's end.
    ended: float | None = None

    def saw(self, job: dict[str, Any]) -> None:
        """A state of the Job or of its pod (`kind` Pod), as it arrives
        (`Cluster.wait_for_job`'s `seen`). The pod says it first: the Job controller
        writes the Job's ready count and end a second or so after the pod changed."""
        if self.ended is not None:
            return  # the end is seen: later sightings (the Job catching up) change nothing
        now = self.clock()
        if job.get("kind") == "Pod":
            ended, running = pod_ended(job), pod_started(job)
        else:
            ended, running = job_finished(job) is not None, job_running(job)
        if ended:
            self.ended = now
        elif running:
            if self.running is None:
                self.running = now
        elif self.running is None:
            self.quiet = now

    def seconds(self, *, fallback: float | None = None) -> float:
        """The metered run of a tool that started: the operator's span from the first
        sighting of it running (else the last before its end) to its end (else now).
        `fallback` (the kubelet's to-the-second times) serves when the operator saw no
        span at all: its first sighting was already the end (a restart after the end)."""
        begin = self.running if self.running is not None else self.quiet
        end = self.ended if self.ended is not None else self.clock()
        if begin is None or end <= begin:
            return metered(fallback or 0.0)
        return metered(end - begin)


__all__ = ["MIN_SECONDS", "Clock", "JobRunClock", "metered"]
