"""Several embedded Kafka nodes on 127.0.0.1 forming one KRaft quorum.

`framebus kafka start --brokers 3` starts one: each node can be killed and restarted on its own,
so tests can take a partition leader away.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from framebus.errors import LocalKafkaError
from framebus_tools.localkafka import CLUSTER_ID_FILE, LocalKafka, cluster_id, default_home


@dataclass(frozen=True)
class LocalCluster:
    """`size` local brokers, each also a KRaft controller, forming one quorum on 127.0.0.1.

    Brokers listen on `base_port` .. `base_port + size - 1` and their controllers on the `size`
    ports after those (3 nodes from 39092: brokers 39092-39094, controllers 39095-39097). Node
    `i` (from 1) is broker id `i`; its state lives under `home/run/cluster-<base_port>/node-<i>`.
    Every node is a `LocalKafka`, so one can be killed and started again on its own.
    """

    base_port: int = 9092
    size: int = 3
    home: Path = field(default_factory=default_home)
    heap: str = "512m"

    @property
    def state_dir(self) -> Path:
        """The cluster's nodes and its cluster id."""
        return self.home / "run" / f"cluster-{self.base_port}"

    @property
    def nodes(self) -> tuple[LocalKafka, ...]:
        """The nodes, in broker id order."""
        id_file = self.state_dir / CLUSTER_ID_FILE
        shared_id = id_file.read_text(encoding="utf-8").strip() if id_file.exists() else None
        voters = tuple((i + 1, self.base_port + self.size + i) for i in range(self.size))
        return tuple(
            LocalKafka(
                port=self.base_port + i,
                controller_port=voters[i][1],
                home=self.home,
                heap=self.heap,
                node_id=voters[i][0],
                voters=voters,
                kraft_cluster_id=shared_id,
                state_dir=self.state_dir / f"node-{voters[i][0]}",
            )
            for i in range(self.size)
        )

    def node(self, broker_id: int) -> LocalKafka:
        """The node whose broker id (as in topic metadata) is `broker_id`."""
        return self.nodes[broker_id - 1]

    @property
    def bootstrap(self) -> str:
        """Every broker's address: a client still bootstraps with one of them down."""
        return ",".join(n.bootstrap for n in self.nodes)

    def start(self, timeout_s: float = 120.0) -> None:
        """Launch every node that is not running, then return once each one answers."""
        id_file = self.state_dir / CLUSTER_ID_FILE
        if not id_file.exists():
            self.state_dir.mkdir(parents=True, exist_ok=True)
            id_file.write_text(cluster_id(), encoding="utf-8")
        deadline = time.monotonic() + timeout_s
        launched: list[tuple[LocalKafka, subprocess.Popen[bytes] | None]] = []
        try:
            for node in self.nodes:
                launched.append((node, None if node.pid() is not None else node.launch()))
            for node, proc in launched:
                node.wait_ready(proc, max(1.0, deadline - time.monotonic()))
        except LocalKafkaError:
            self.stop()
            raise

    def stop(self, timeout_s: float = 30.0) -> list[bool]:
        """Stop every node at once (one by one, the last would wait for a lost quorum)."""
        with ThreadPoolExecutor(self.size) as pool:
            return list(pool.map(lambda n: n.stop(timeout_s), self.nodes))

    def wipe(self) -> None:
        """Delete every node's data and the cluster id (all must be stopped)."""
        if any(n.pid() is not None for n in self.nodes):
            raise LocalKafkaError("stop the local Kafka cluster before wiping its data")
        shutil.rmtree(self.state_dir, ignore_errors=True)
