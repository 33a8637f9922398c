"""What the cluster says about the invocations: a list-and-watch per namespace that
survives API server restarts, and the automatic reviewer that reads it."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from kubernetes import client, watch

from tooladapter import GROUP, VERSION

from .config import TERMINAL
from .objects import Agent, approval_body, create, custom


def state_of(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("state") or "(new)")


class Tracker:
    """The latest version of every invocation of one namespace, kept by a watch that
    lists again whenever it breaks (API server restarts, expired resource versions)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.objects: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.relists = 0
        self.errors: Counter[str] = Counter()
        self.thread = threading.Thread(target=self.run, name=f"watch {namespace}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        api = custom(self.api)
        while not self.stopping.is_set():
            try:
                listed = api.list_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "toolinvocations", _request_timeout=(5, 60)
                )
                with self.lock:
                    self.objects = {o["metadata"]["name"]: o for o in listed.get("items") or []}
                self.relists += 1
                version = listed["metadata"]["resourceVersion"]
                stream = watch.Watch()
                for event in stream.stream(
                    api.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.namespace,
                    "toolinvocations",
                    resource_version=version,
                    timeout_seconds=30,
                    _request_timeout=(5, 45),
                ):
                    if self.stopping.is_set():
                        stream.stop()
                        break
                    if event["type"] == "ERROR":
                        break
                    obj = event["object"]
                    name = obj["metadata"]["name"]
                    with self.lock:
                        if event["type"] == "DELETED":
                            self.objects.pop(name, None)
                        else:
                            self.objects[name] = obj
            except Exception as exc:
                self.errors[type(exc).__name__] += 1
                self.stopping.wait(1.0)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return dict(self.objects)

    def states(self) -> Counter[str]:
        return Counter(state_of(o) for o in self.snapshot().values())

    def unfinished(self, names: set[str]) -> list[str]:
        """Of `names`, those not (yet) seen in a terminal state."""
        seen = self.snapshot()
        return sorted(n for n in names if n not in seen or state_of(seen[n]) not in TERMINAL)


class Reviewer:
    """Approves every invocation that waits in AwaitingApproval, as its namespace's
    reviewer (its own token, role tooladapter-reviewer), until stopped."""

    def __init__(self, pairs: list[tuple[Tracker, Agent]]) -> None:
        self.pairs = pairs
        self.approved: set[str] = set()
        self.attempts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.refused: dict[str, str] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="reviewer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            for tracker, reviewer in self.pairs:
                for obj in tracker.snapshot().values():
                    if self.stopping.is_set():
                        return
                    uid = obj["metadata"]["uid"]
                    if state_of(obj) != "AwaitingApproval" or uid in self.approved:
                        continue
                    if uid in self.refused:
                        continue
                    self.approve(reviewer, obj)

    def approve(self, reviewer: Agent, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        self.attempts[uid] += 1
        try:
            create(
                reviewer.api, reviewer.namespace, "toolapprovals", approval_body(reviewer, obj, 900)
            )
        except client.ApiException as exc:
            if exc.status == 409:
                self.approved.add(uid)
                return
            self.errors[f"HTTP {exc.status}"] += 1
            if exc.status in (400, 422):  # refused for good (admission, schema)
                self.refused[uid] = f"HTTP {exc.status}: {str(exc.body)[:300]}"
            return
        except Exception as exc:  # the API server is away: next round
            self.errors[type(exc).__name__] += 1
            return
        self.approved.add(uid)
