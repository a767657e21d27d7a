"""The embedded local Kafka: Apache Kafka in KRaft mode, fetched from Maven Central, on 127.0.0.1.

`framebus kafka start` resolves `org.apache.kafka:kafka_2.13` and its runtime dependencies (plus a
log4j2 binding) with Maven into a user cache once, formats KRaft storage, and starts one combined
broker + controller. Later starts reuse the cache and need no network. `--brokers 3` starts a
`localcluster.LocalCluster` instead: three such nodes forming one KRaft quorum.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from framebus.errors import LocalKafkaError
from framebus.kafka.settings import BROKER_MAX_MESSAGE_BYTES, KafkaSettings
from framebus.kafka.topics import broker_reachable, min_insync_replicas, replication_factor_for
from framebus_tools.kafkajars import ensure_kafka_jars, kafka_libs_dir

NODE_ID = "1"  # the single KRaft node: broker and controller
CLUSTER_ID_FILE = "cluster.id"

LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="server" fileName="{log}" filePattern="{log}.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="50 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.controller" level="INFO"/>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
"""


def default_home() -> Path:
    """Cache root: `$FRAMEBUS_HOME`, else `$XDG_CACHE_HOME/framebus`, else `~/.cache/framebus`."""
    if os.environ.get("FRAMEBUS_HOME"):
        return Path(os.environ["FRAMEBUS_HOME"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "framebus"


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already accepts connections on `host:port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


@dataclass(frozen=True)
class LocalKafka:
    """One local broker, identified by its port; its state lives under `home/run/<port>`."""

    port: int = 9092
    controller_port: int | None = None
    home: Path = field(default_factory=default_home)
    heap: str = "768m"
    extra_properties: tuple[tuple[str, str], ...] = ()
    listeners: tuple[str, ...] = ()  # extra `NAME://host:port` listeners (e.g. SASL_SSL)
    listener_protocols: tuple[str, ...] = ()  # extra `NAME:PROTOCOL` map entries
    jvm_options: tuple[str, ...] = ()
    # SCRAM credentials created at format time, e.g. `SCRAM-SHA-512=[name=alice,password=...]`.
    scram_users: tuple[str, ...] = ()
    node_id: int = int(NODE_ID)
    # (node id, controller port) of every voter of a cluster's quorum; empty: this node alone.
    voters: tuple[tuple[int, int], ...] = ()
    kraft_cluster_id: str | None = None  # the id a cluster's nodes share; None: a fresh one
    state_dir: Path | None = None  # config, data and logs; None: `home/run/<port>`

    @property
    def libs_dir(self) -> Path:
        """Where the Kafka jars are cached."""
        return kafka_libs_dir(self.home)

    @property
    def run_dir(self) -> Path:
        """Config, data, logs and pid file of this broker."""
        return self.state_dir or self.home / "run" / str(self.port)

    @property
    def log_file(self) -> Path:
        """The broker's server log."""
        return self.run_dir / "logs" / "server.log"

    @property
    def bootstrap(self) -> str:
        """The bootstrap address of the PLAINTEXT listener."""
        return f"127.0.0.1:{self.port}"

    @property
    def _pid_file(self) -> Path:
        return self.run_dir / "kafka.pid"

    @property
    def _controller(self) -> int:
        return self.controller_port or self.port + 1

    # -- fetching ---------------------------------------------------------------------------

    def ensure_jars(self) -> Path:
        """Resolve Kafka's jars with Maven once; later calls use the cache without network."""
        return ensure_kafka_jars(self.libs_dir)

    # -- lifecycle --------------------------------------------------------------------------

    def _java(self) -> str:
        java_home = os.environ.get("JAVA_HOME")
        java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
        if not java or not Path(java).exists():
            raise LocalKafkaError(
                "Java 17 or newer is needed to run the local Kafka, and `java` is not on PATH. "
                "Install it: `sudo apt-get install openjdk-17-jre-headless` (Debian/Ubuntu) or "
                "`brew install openjdk@17` (macOS)."
            )
        return java

    def server_properties(self) -> str:
        """The broker's configuration: KRaft combined mode, limits raised for frame-sized records."""
        listeners = [
            f"PLAINTEXT://127.0.0.1:{self.port}",
            f"CONTROLLER://127.0.0.1:{self._controller}",
            *self.listeners,
        ]
        advertised = [x for x in listeners if not x.startswith("CONTROLLER")]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT", *self.listener_protocols]
        voters = self.voters or ((self.node_id, self._controller),)
        copies = replication_factor_for(len(voters))
        min_isr = str(min_insync_replicas(copies))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": ",".join(f"{n}@127.0.0.1:{p}" for n, p in voters),
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(self.run_dir / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            # A cluster of three keeps three copies of every internal topic (and of topics created
            # without a replication factor) and acknowledges a write once two hold it; the offsets
            # topic takes the broker-wide min.insync.replicas. One broker may then die without
            # losing an acknowledged record or refusing writes. A single broker: one and one.
            "default.replication.factor": str(copies),
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": str(copies),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(copies),
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": str(copies),
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            # Kafka's default record limit is 1 MiB; a 640x640x3 frame is 1.2 MB.
            "message.max.bytes": str(BROKER_MAX_MESSAGE_BYTES),
            "replica.fetch.max.bytes": str(BROKER_MAX_MESSAGE_BYTES),
            "socket.request.max.bytes": str(200 * 1024 * 1024),
            "log.retention.check.interval.ms": "60000",
            **dict(self.extra_properties),
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def pid(self) -> int | None:
        """The broker's process id if it is running."""
        try:
            pid = int(self._pid_file.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid if _is_alive(pid) else None

    def is_ready(self, timeout_s: float = 3.0) -> bool:
        """True when the broker answers a metadata request."""
        return broker_reachable(KafkaSettings(bootstrap_servers=self.bootstrap), timeout_s)

    def start(self, timeout_s: float = 90.0) -> None:
        """Fetch (once), format (once) and start the broker; return when it answers."""
        if self.pid() is not None:
            if self.is_ready():
                return
            raise LocalKafkaError(
                f"a local Kafka (pid {self.pid()}) is running but does not answer "
                f"on {self.bootstrap}; see {self.log_file}"
            )
        self.wait_ready(self.launch(), timeout_s)

    def launch(self) -> subprocess.Popen[bytes]:
        """Start the broker's JVM without waiting for it to answer.

        A node of a cluster answers only once a majority of its quorum runs, so a cluster
        launches every node before it waits for any.
        """
        if port_taken(self.port):
            raise LocalKafkaError(
                f"port {self.port} is already taken by a process that is not this local Kafka "
                f"(its home is {self.home}): stop that process, or start this one on another "
                "port (--port, FRAMEBUS_KAFKA_PORT)"
            )
        libs = self.ensure_jars()
        java = self._java()
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        props = self.run_dir / "server.properties"
        props.write_text(self.server_properties(), encoding="utf-8")
        log4j = self.run_dir / "log4j2.xml"
        log4j.write_text(LOG4J2_XML.format(log=self.log_file), encoding="utf-8")
        classpath = f"{libs}/*"
        if not (self.run_dir / "data" / "meta.properties").exists():
            self._format(props)
        out = (self.run_dir / "logs" / "kafka.out").open("ab")
        proc = subprocess.Popen(
            [
                java,
                f"-Xmx{self.heap}",
                f"-Xms{self.heap}",
                "-XX:+UseG1GC",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={log4j}",
                "-Dkafka.logs.dir=" + str(self.log_file.parent),
                *self.jvm_options,
                "-cp",
                classpath,
                "kafka.Kafka",
                str(props),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives `framebus kafka start`
        )
        out.close()
        self._pid_file.write_text(str(proc.pid), encoding="utf-8")
        return proc

    def wait_ready(self, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
        """Return once the broker answers; stop it and raise if it exits or stays silent."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise LocalKafkaError(
                    f"local Kafka exited with code {proc.returncode} during start-up; "
                    f"see {self.log_file} and {self.run_dir / 'logs' / 'kafka.out'}:\n"
                    + _tail(self.run_dir / "logs" / "kafka.out")
                )
            if self.is_ready(2.0):
                return
            time.sleep(0.5)
        self.stop()
        raise LocalKafkaError(
            f"local Kafka did not answer on {self.bootstrap} within {timeout_s:.0f} s; "
            f"see {self.log_file}"
        )

    def tool_command(self, main_class: str, *args: str) -> list[str]:
        """A Kafka tool's command line (e.g. `kafka.admin.ConfigCommand`): the cached jars."""
        return [self._java(), "-cp", f"{self.libs_dir}/*", main_class, *args]

    def _format(self, props: Path) -> None:
        proc = subprocess.run(
            self.tool_command(
                "kafka.tools.StorageTool",
                "format",
                "--ignore-formatted",
                # One token: an id may start with "-", which the tool would read as an option.
                f"--cluster-id={self.kraft_cluster_id or cluster_id()}",
                "-c",
                str(props),
                *(arg for user in self.scram_users for arg in ("--add-scram", user)),
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise LocalKafkaError(f"formatting KRaft storage failed:\n{proc.stdout}{proc.stderr}")

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker cleanly (SIGTERM, then SIGKILL after the timeout); False if none ran."""
        pid = self.pid()
        if pid is None:
            return False
        os.killpg(pid, signal.SIGTERM) if _is_group_leader(pid) else os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _is_alive(pid):
            time.sleep(0.2)
        if _is_alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _is_alive(pid):
                time.sleep(0.1)
        self._pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> bool:
        """SIGKILL the broker: no controlled shutdown, like a machine losing power; False if none ran."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGKILL)
        while _is_alive(pid):
            time.sleep(0.05)
        self._pid_file.unlink(missing_ok=True)
        return True

    def wipe(self) -> None:
        """Delete this broker's data (it must be stopped)."""
        if self.pid() is not None:
            raise LocalKafkaError("stop the local Kafka before wiping its data")
        shutil.rmtree(self.run_dir, ignore_errors=True)


def cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding.

    Like Kafka's own `Uuid.randomUuid`, it never starts with "-": 1 in 64 ids would, and
    `kafka-storage format -t -x...` then failed ("argument --cluster-id/-t: expected one
    argument"), once in a CI run.
    """
    while True:
        text = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited child not yet reaped) still answers kill(0): read its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    if state == "Z":
        # Reap it if it is our child; if it is not, its parent will.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
