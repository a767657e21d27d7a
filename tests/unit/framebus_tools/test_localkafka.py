"""The embedded broker and cluster: KRaft ids, ports, generated configs, replication policy."""

from __future__ import annotations

import base64
import itertools
import socket
from pathlib import Path

import pytest

from framebus.errors import LocalKafkaError
from framebus.kafka.topics import TopicSpec, replication_factor_for
from framebus_tools.cli import build_parser
from framebus_tools.localcluster import LocalCluster
from framebus_tools.localkafka import LocalKafka, cluster_id, port_taken


def test_cluster_id_is_16_bytes_of_url_safe_base64() -> None:
    text = cluster_id()
    assert len(text) == 22
    assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_cluster_id_never_starts_with_a_dash() -> None:
    # The first draw encodes to "-" first (0xf8 -> 62 -> "-"); the id is drawn again.
    draws = itertools.chain([b"\xf8" + bytes(15)], itertools.repeat(bytes(16)))
    text = cluster_id(lambda: next(draws))
    assert text == "A" * 22
    assert base64.urlsafe_b64encode(b"\xf8" + bytes(15)).decode().startswith("-")


def test_start_when_port_taken_by_another_process_then_refuses_with_the_port(
    tmp_path: Path,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert port_taken(port)
        broker = LocalKafka(port=port, home=tmp_path)
        with pytest.raises(LocalKafkaError, match=f"port {port} is already taken"):
            broker.start()


def test_port_taken_when_nothing_listens_then_false() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert not port_taken(port)


def _props(broker: LocalKafka) -> dict[str, str]:
    lines = broker.server_properties().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_server_properties_when_single_broker_then_one_node_quorum_and_one_copy(
    tmp_path: Path,
) -> None:
    props = _props(LocalKafka(port=29092, home=tmp_path))
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:29093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093"
    assert props["log.dirs"] == str(tmp_path / "run" / "29092" / "data")
    for key in (
        "default.replication.factor",
        "min.insync.replicas",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ):
        assert props[key] == "1", key


def test_cluster_nodes_when_three_from_39092_then_brokers_then_controllers_on_next_ports(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(base_port=39092, size=3, home=tmp_path)
    nodes = cluster.nodes
    assert [n.node_id for n in nodes] == [1, 2, 3]
    assert [n.port for n in nodes] == [39092, 39093, 39094]
    assert cluster.bootstrap == "127.0.0.1:39092,127.0.0.1:39093,127.0.0.1:39094"
    assert cluster.node(2) == nodes[1]
    voters = "1@127.0.0.1:39095,2@127.0.0.1:39096,3@127.0.0.1:39097"
    dirs = set()
    for node in nodes:
        props = _props(node)
        assert props["node.id"] == str(node.node_id)
        assert props["controller.quorum.voters"] == voters
        controller = 39095 + node.node_id - 1
        assert props["listeners"] == (
            f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{controller}"
        )
        assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{node.port}"
        dirs.add(props["log.dirs"])
        assert node.run_dir == tmp_path / "run" / "cluster-39092" / f"node-{node.node_id}"
    assert len(dirs) == 3  # each node its own data


def test_cluster_properties_when_three_brokers_then_three_copies_and_two_in_sync(
    tmp_path: Path,
) -> None:
    props = _props(LocalCluster(base_port=39092, size=3, home=tmp_path).nodes[0])
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"  # also what __consumer_offsets takes
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"


def test_cluster_nodes_when_cluster_id_written_then_every_node_formats_with_it(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(base_port=39092, size=3, home=tmp_path)
    assert {n.kraft_cluster_id for n in cluster.nodes} == {None}
    cluster.state_dir.mkdir(parents=True)
    (cluster.state_dir / "cluster.id").write_text("AAAAAAAAAAAAAAAAAAAAAA\n", encoding="utf-8")
    assert {n.kraft_cluster_id for n in cluster.nodes} == {"AAAAAAAAAAAAAAAAAAAAAA"}


def test_cluster_start_when_first_port_taken_then_refuses_and_launches_nothing(
    tmp_path: Path,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        cluster = LocalCluster(base_port=port, size=3, home=tmp_path)
        with pytest.raises(LocalKafkaError, match=f"port {port} is already taken"):
            cluster.start()
    assert all(n.pid() is None for n in cluster.nodes)


def test_cli_when_brokers_3_given_then_parsed_and_default_is_one_broker() -> None:
    parser = build_parser()
    assert parser.parse_args(["kafka", "start"]).brokers == 1
    args = parser.parse_args(["kafka", "stop", "--brokers", "3", "--port", "39092"])
    assert (args.brokers, args.port) == (3, 39092)
    assert parser.parse_args(["topics", "create"]).replication_factor is None


@pytest.mark.parametrize(("brokers", "copies"), [(1, 1), (2, 2), (3, 3), (5, 3)])
def test_replication_factor_for_when_brokers_then_three_or_one_per_broker(
    brokers: int, copies: int
) -> None:
    assert replication_factor_for(brokers) == copies


def test_topic_spec_when_min_insync_replicas_set_then_kept() -> None:
    spec = TopicSpec("t", 1, 3, {"min.insync.replicas": "3"})
    assert spec.creation_config() == {"min.insync.replicas": "3"}
