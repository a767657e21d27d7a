from framebus_inferencer.pipeline.commit import commit_due


def test_commit_due_when_interval_not_over_then_waits_unless_urgent() -> None:
    assert not commit_due(now=1.05, in_flight=False, retry_at=0.0, next_at=1.1, urgent=False)
    assert commit_due(now=1.05, in_flight=False, retry_at=0.0, next_at=1.1, urgent=True)
    assert commit_due(now=1.1, in_flight=False, retry_at=0.0, next_at=1.1, urgent=False)


def test_commit_due_when_one_in_flight_or_after_failure_then_never() -> None:
    assert not commit_due(now=5.0, in_flight=True, retry_at=0.0, next_at=0.0, urgent=True)
    assert not commit_due(now=5.0, in_flight=False, retry_at=5.5, next_at=0.0, urgent=True)
    assert commit_due(now=5.5, in_flight=False, retry_at=5.5, next_at=0.0, urgent=False)
