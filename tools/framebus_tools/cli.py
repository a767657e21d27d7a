"""The `framebus` command: local Kafka, topics, the six services, the demo and the tools."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from framebus import settings as cfg
from framebus.errors import FramebusError
from framebus.kafka.settings import KafkaSettings
from framebus.logs import configure_logging
from framebus.topology import Sizing, TopicSettings

if TYPE_CHECKING:
    from framebus_tools.localcluster import LocalCluster

# The services have their own entry points (`python -m framebus_decoder`, `..._inferencer`,
# `..._tracker`, `..._alerts`, `..._live`, `..._clips`); the CLI hands them their arguments, so both ways of
# starting a service run the same code.
SERVICES = {
    "decoder": "decode cameras and publish letterboxed frames (python -m framebus_decoder)",
    "inferencer": "batch frames through the model and publish detections "
    "(python -m framebus_inferencer)",
    "track": "give every detection a stable track id and publish tracks "
    "(python -m framebus_tracker)",
    "alerts": "rules on objects and frames (dwell, line counts, zones, occupancy); alerts out "
    "(python -m framebus_alerts)",
    "live": "serve a web page of every camera with its boxes, figures and alerts "
    "(python -m framebus_live)",
    "clips": "an MP4 clip and a JPEG snapshot of every alert, cut from the video topic "
    "(python -m framebus_clips)",
}
SERVICE_MODULES = {
    "decoder": "framebus_decoder",
    "inferencer": "framebus_inferencer",
    "track": "framebus_tracker",
    "alerts": "framebus_alerts",
    "live": "framebus_live",
    "clips": "framebus_clips",
}


def _kafka_command(args: argparse.Namespace) -> int:
    from framebus_tools.localkafka import LocalKafka

    if args.brokers < 1:
        raise FramebusError(f"--brokers must be 1 or more, not {args.brokers}")
    if args.brokers > 1:
        return _cluster_command(args)
    broker = LocalKafka(port=args.port, home=Path(args.home) if args.home else LocalKafka().home)
    if args.action == "start":
        broker.start()
        print(f"local Kafka {broker.bootstrap} is up (pid {broker.pid()}); logs: {broker.log_file}")
    elif args.action == "stop":
        print("stopped" if broker.stop() else f"no local Kafka was running on port {args.port}")
    elif args.action == "status":
        pid = broker.pid()
        if pid is None:
            print(f"local Kafka on port {args.port}: not running")
            return 3
        state = "answering" if broker.is_ready() else "NOT answering"
        print(
            f"local Kafka {broker.bootstrap}: running (pid {pid}), {state}; logs: {broker.log_file}"
        )
        return 0 if state == "answering" else 1
    elif args.action == "wipe":
        broker.wipe()
        print(f"deleted {broker.run_dir}")
    return 0


def _cluster_command(args: argparse.Namespace) -> int:
    from framebus_tools.localcluster import LocalCluster
    from framebus_tools.localkafka import default_home

    home = Path(args.home) if args.home else default_home()
    cluster = LocalCluster(base_port=args.port, size=args.brokers, home=home)
    if args.action == "start":
        cluster.start()
        print(f"local Kafka cluster {cluster.bootstrap} is up ({args.brokers} brokers)")
    elif args.action == "stop":
        stopped = sum(cluster.stop())
        print(f"stopped {stopped} of {args.brokers} brokers" if stopped else "none was running")
    elif args.action == "wipe":
        cluster.wipe()
        print(f"deleted {cluster.state_dir}")
    else:
        return _cluster_status(cluster)
    return 0


def _cluster_status(cluster: LocalCluster) -> int:
    """One line per node; exit 0 when all answer, 3 when none runs, else 1."""
    running = 0
    answering = 0
    for node in cluster.nodes:
        pid = node.pid()
        if pid is None:
            print(f"broker {node.node_id} {node.bootstrap}: not running")
            continue
        running += 1
        ready = node.is_ready()
        answering += ready
        state = "answering" if ready else "NOT answering"
        print(
            f"broker {node.node_id} {node.bootstrap}: running (pid {pid}), {state}; "
            f"logs: {node.log_file}"
        )
    if running == 0:
        return 3
    return 0 if answering == len(cluster.nodes) else 1


def _topics_command(args: argparse.Namespace) -> int:
    from framebus.kafka.topics import ensure_topics, wait_for_broker
    from framebus.topology import Sizing, pipeline_specs

    kafka = cfg.load(KafkaSettings, os.environ, args)
    names = cfg.load(TopicSettings, os.environ, args)
    sizing = Sizing(
        args.frames_partitions,
        args.detections_partitions,
        args.alerts_partitions,
        args.replication_factor or 0,
        video_partitions=args.video_partitions,
        video_retention_ms=args.video_retention_ms,
    )
    if args.wait_s > 0:
        wait_for_broker(kafka, args.wait_s)
    copies = sizing.copies(kafka)
    specs = pipeline_specs(names, dataclasses.replace(sizing, replication_factor=copies))
    created = ensure_topics(kafka, specs)
    for spec in specs:
        state = "created" if spec.name in created else "exists"
        print(f"{spec.name}: {state} ({spec.partitions} partitions, replication factor {copies})")
    return 0


def _service_main(name: str, argv: Sequence[str]) -> int:
    """`framebus decoder|inferencer|track|alerts|live|clips ...`: the service's own entry point."""
    module = importlib.import_module(f"{SERVICE_MODULES[name]}.__main__")
    code: int = module.main(argv, f"framebus {name}")
    return code


def _demo_command(args: argparse.Namespace) -> int:
    from framebus_tools.demo import DemoSettings, run_demo

    return run_demo(cfg.load(DemoSettings, os.environ, args))


def _render_command(args: argparse.Namespace) -> int:
    from framebus_tools.render.service import RenderSettings, run

    configure_logging("warning", json_lines=False)
    return run(cfg.load(RenderSettings, os.environ, args))


def _tune_command(args: argparse.Namespace) -> int:
    from framebus_tools.perf.extras import require_tools_extra
    from framebus_tools.perf.tune import TuneSettings, batch_sizes, engine_factory, run_tune
    from framebus_tools.perf.tunereport import format_table, write_outputs

    require_tools_extra("tune", "matplotlib", "tqdm")  # before minutes of measuring
    from tqdm import tqdm

    settings = cfg.load(TuneSettings, os.environ, args)
    configure_logging("warning", json_lines=False)
    steps = len(batch_sizes(settings.max_batch_limit)) + 1
    with tqdm(total=steps, desc="measuring", unit="step") as bar:

        def progress(what: str) -> None:
            bar.set_postfix_str(what)
            bar.update(1)

        result = run_tune(settings, engine_factory(settings), progress)
    files = write_outputs(result, settings)
    print(format_table(result))
    print("\nwrote " + ", ".join(files.values()))
    print("\nHelm values:\n" + Path(files["helm"]).read_text(encoding="utf-8"))
    return 0 if result.recommendation.fits else 1


def _loadtest_command(args: argparse.Namespace) -> int:
    from framebus_tools.perf.extras import require_tools_extra
    from framebus_tools.perf.loadtest import LoadtestSettings, format_report, run_loadtest

    require_tools_extra("loadtest", "matplotlib")  # before starting Kafka and the services
    settings = cfg.load(LoadtestSettings, os.environ, args)
    configure_logging("warning", json_lines=False)
    _start_local_kafka_if_needed(settings.kafka)
    result = run_loadtest(settings)
    print(format_report(result))
    print(f"wrote {settings.output_dir}/loadtest.json, loadtest-latency.png")
    return 0 if result.ok else 1


def _start_local_kafka_if_needed(kafka: KafkaSettings) -> None:
    from framebus.kafka.topics import broker_reachable
    from framebus_tools.localkafka import LocalKafka

    if not broker_reachable(kafka, 3.0):
        broker = LocalKafka(port=int(kafka.bootstrap_servers.rsplit(":", 1)[-1]))
        broker.start()
        print(f"started the local Kafka {broker.bootstrap}; logs: {broker.log_file}")


def _config_docs_command(args: argparse.Namespace) -> int:
    from framebus_tools.configdoc import configuration_reference

    sys.stdout.write(configuration_reference())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The full command-line interface."""
    from framebus_tools.demo import DemoSettings
    from framebus_tools.render.service import RenderSettings

    parser = argparse.ArgumentParser(prog="framebus", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    kafka = sub.add_parser("kafka", help="run the embedded local Kafka (KRaft, 127.0.0.1)")
    kafka.add_argument("action", choices=["start", "stop", "status", "wipe"])
    kafka.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("FRAMEBUS_KAFKA_PORT", "9092")),
        help="broker port; the controller uses port+1. With --brokers N: the first broker's, "
        "brokers on port..port+N-1, controllers on the N ports after [env FRAMEBUS_KAFKA_PORT]",
    )
    kafka.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="1: one broker; 3: a cluster of three in one KRaft quorum (internal topics with "
        "3 replicas, min.insync.replicas 2); give stop/status/wipe the same number",
    )
    kafka.add_argument("--home", default=None, help="cache and data root [env FRAMEBUS_HOME]")
    kafka.set_defaults(func=_kafka_command)

    topics = sub.add_parser(
        "topics",
        help="create the whole pipeline's topics (idempotent): frames, detections, tracks, "
        "alerts, the two changelogs, video, clips and the dead-letter topic, under the names "
        "the flags give",
    )
    topics.add_argument("action", choices=["create"])
    topics.add_argument("--frames-partitions", type=int, default=6)
    topics.add_argument(
        "--detections-partitions",
        type=int,
        default=6,
        help="also the tracks topic's and the two changelogs' (they follow it)",
    )
    topics.add_argument(
        "--alerts-partitions", type=int, default=3, help="also the clips topic's (one per alert)"
    )
    topics.add_argument("--video-partitions", type=int, default=Sizing.video_partitions)
    topics.add_argument(
        "--video-retention-ms",
        type=int,
        default=Sizing.video_retention_ms,
        help="how long the video topic keeps each camera's packets: the oldest alert a clip "
        "can still be cut for",
    )
    topics.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        help="copies of each partition; min.insync.replicas is 2 from 3 copies, else 1 "
        "(default: 3, or the number of brokers if fewer)",
    )
    topics.add_argument(
        "--wait-s",
        type=float,
        default=0.0,
        help="wait up to this long for a broker to answer first (a step started beside its "
        "broker); 0: ask once",
    )
    cfg.add_arguments(topics, KafkaSettings)
    cfg.add_arguments(topics, TopicSettings)
    topics.set_defaults(func=_topics_command)

    # Listed for `framebus --help` only: `main` hands their arguments to the service's own entry
    # point (`python -m framebus_<service>`), which parses its flags.
    for name, help_text in SERVICES.items():
        sub.add_parser(name, help=help_text, add_help=False)

    commands: Sequence[tuple[str, str, type, Callable[[argparse.Namespace], int]]] = (
        (
            "demo",
            "run the whole pipeline on generated cameras and print detections",
            DemoSettings,
            _demo_command,
        ),
        (
            "render",
            "draw a camera's detections on its frames, to an MP4 clip or a PNG contact sheet",
            RenderSettings,
            _render_command,
        ),
    )
    for name, help_text, settings_cls, func in commands:
        p = sub.add_parser(name, help=help_text)
        cfg.add_arguments(p, settings_cls)
        p.set_defaults(func=func)

    from framebus_tools.perf.loadtest import LoadtestSettings
    from framebus_tools.perf.tune import TuneSettings

    tune = sub.add_parser("tune", help="measure batch sizes and recommend max_batch/max_wait_ms")
    cfg.add_arguments(tune, TuneSettings)
    tune.set_defaults(func=_tune_command)
    loadtest = sub.add_parser("loadtest", help="replay many cameras end to end and report latency")
    cfg.add_arguments(loadtest, LoadtestSettings)
    loadtest.set_defaults(func=_loadtest_command)

    docs = sub.add_parser("config-docs", help="print the configuration reference (Markdown)")
    docs.set_defaults(func=_config_docs_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `framebus` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SERVICES:
        return _service_main(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except FramebusError as exc:
        print(f"framebus {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
