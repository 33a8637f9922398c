"""Rate limits: counted as calls start executing, per tool and tenant (and per caller)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tooladapter.pipeline.ratelimit import RateBook

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def admit(book: RateBook, uid: str, at: datetime, **kw: object) -> bool:
    args: dict[str, object] = {
        "namespace": "team-a",
        "tool": "deploy",
        "caller": "agent-1",
        "per_caller": False,
        "per_minute": 5,
        "concurrency": None,
        **kw,
    }
    return book.admit(uid=uid, now=at, **args).allowed  # type: ignore[arg-type]


def test_per_minute_admits_five_of_ten_and_says_when_to_retry() -> None:
    book = RateBook()
    results = [admit(book, f"u{i}", T0 + timedelta(seconds=i)) for i in range(10)]
    assert results == [True] * 5 + [False] * 5
    verdict = book.admit(
        uid="late",
        namespace="team-a",
        tool="deploy",
        caller="agent-1",
        per_caller=False,
        per_minute=5,
        concurrency=None,
        now=T0 + timedelta(seconds=10),
    )
    assert not verdict.allowed and "perMinute is 5" in verdict.reason
    assert verdict.retry_after_seconds == 51  # the oldest start leaves the window at 60 s
    for i in range(5):
        book.release(f"u{i}")
    assert not admit(book, "early", T0 + timedelta(seconds=59))
    assert admit(book, "next-minute", T0 + timedelta(seconds=61))


def test_concurrency_counts_running_calls_until_they_end() -> None:
    book = RateBook()
    assert admit(book, "a", T0, per_minute=None, concurrency=1)
    assert not admit(book, "b", T0, per_minute=None, concurrency=1)
    book.release("a")
    assert admit(book, "b", T0, per_minute=None, concurrency=1)


def test_per_caller_limits_one_caller_without_starving_another() -> None:
    book = RateBook()
    for i in range(2):
        assert admit(book, f"x{i}", T0, per_caller=True, per_minute=2, caller="x")
    assert not admit(book, "x2", T0, per_caller=True, per_minute=2, caller="x")


def test_a_resumed_call_is_not_counted_twice() -> None:
    book = RateBook()
    assert admit(book, "a", T0, per_minute=1)
    assert admit(book, "a", T0 + timedelta(seconds=1), per_minute=1)


def test_a_takeover_rebuilds_the_book_from_the_watch() -> None:
    book = RateBook()
    for i in range(5):
        book.observe(
            uid=f"w{i}",
            namespace="team-a",
            tool="deploy",
            caller="agent-1",
            started=T0,
            running=False,
            now=T0,
        )
    # History older than the window costs nothing.
    book.observe(
        uid="old",
        namespace="team-a",
        tool="other",
        caller="agent-1",
        started=T0 - timedelta(hours=1),
        running=False,
        now=T0,
    )
    assert ("team-a", "other", "") not in book.usage
    assert not admit(book, "new", T0 + timedelta(seconds=5))


def test_no_limits_admit_everything_and_keep_nothing() -> None:
    book = RateBook()
    assert admit(book, "a", T0, per_minute=None, concurrency=None)
    assert book.usage == {}
