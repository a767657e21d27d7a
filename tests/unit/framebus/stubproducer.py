"""A scripted librdkafka producer stand-in, under the real `framebus.kafka.producer.Producer`.

Each call is recorded; a call named in the script raises its next error (a librdkafka error is
raised as confluent_kafka raises it, any other exception as it is; None lets that call succeed),
then succeeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import confluent_kafka

from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings

TIMED_OUT = confluent_kafka.KafkaError(
    confluent_kafka.KafkaError._TIMED_OUT, "timed out", retriable=True
)
ABORTABLE = confluent_kafka.KafkaError(
    confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH, "epoch", txn_requires_abort=True
)
FENCED = confluent_kafka.KafkaError(confluent_kafka.KafkaError._FENCED, "fenced", fatal=True)
Script = dict[str, list[Any]]


class ScriptedClient:
    """Records every call; a scripted call raises the next error of its script, then succeeds."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script if script is not None else {}
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., int]:
        def call(*args: Any, **kwargs: Any) -> int:
            self.calls.append((name, args, kwargs))
            errors = self.script.get(name, [])
            if errors:
                error = errors.pop(0)
                if error is None:
                    return 0
                if isinstance(error, BaseException):
                    raise error
                raise confluent_kafka.KafkaException(error)
            return 0  # poll() and flush(): nothing served, nothing left

        return call

    def __len__(self) -> int:
        return 0

    @property
    def names(self) -> list[str]:
        """The calls' names in order, without poll() (after each produce) and close()'s flush()."""
        return [name for name, _args, _kw in self.calls if name not in ("poll", "flush")]

    def produced(self) -> list[tuple[str, Any, int | None]]:
        """(topic, key, explicit partition or None) of each produce() call."""
        return [
            (args[0], kw.get("key"), kw.get("partition"))
            for name, args, kw in self.calls
            if name == "produce"
        ]


class Watched(list[tuple[str, float]]):
    """A CallWatch that records (name, budget_s) of every call it watches."""

    @contextmanager
    def __call__(self, name: str, budget_s: float) -> Iterator[None]:
        self.append((name, budget_s))
        yield


def scripted_producer(
    script: Script | None = None, **kwargs: Any
) -> tuple[Producer, ScriptedClient]:
    """A transactional Producer on a ScriptedClient (kwargs: the Producer's, e.g. `watch`)."""
    client = ScriptedClient(script)
    producer = Producer(
        KafkaSettings(), {"transactional.id": "t"}, factory=lambda _c: client, **kwargs
    )
    return producer, client
