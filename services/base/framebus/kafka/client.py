"""What the Kafka wrappers share: their librdkafka configuration, a client made on first use, `with`."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from framebus.errors import KafkaError


class LazyClient:
    """Holds a librdkafka configuration and builds the confluent_kafka client on first use."""

    def __init__(self, config: dict[str, Any], factory: Callable[[dict[str, Any]], Any]) -> None:
        self._config = config
        self._factory = factory
        self._client: Any = None

    @property
    def config(self) -> dict[str, Any]:
        """The librdkafka configuration the client is built with (a copy)."""
        return dict(self._config)

    @property
    def _raw(self) -> Any:
        """The confluent_kafka client, created on first use."""
        if self._client is None:
            self._client = self._factory(self._config)
        return self._client

    def close(self) -> Any:
        """Release the client (each wrapper says what else it does first)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def librdkafka_error(what: str, err: Any) -> KafkaError:
    """A confluent_kafka.KafkaError `err` as KafkaError: `what` failed, and librdkafka's why.

    Keeps librdkafka's error name and retriable flag, which `framebus.kafka.retry` decides by.
    """
    return KafkaError(f"{what}: {err.str()}", err.name(), bool(err.retriable()))
