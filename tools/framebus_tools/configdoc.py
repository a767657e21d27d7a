"""The configuration reference, generated from the settings classes (docs/configuration.md)."""

from __future__ import annotations

from framebus.kafka.settings import KafkaSettings
from framebus.settings import reference_markdown
from framebus.topology import TopicSettings

HEADER = """# Configuration reference

Every setting can be given as a `FRAMEBUS_*` environment variable or as a command-line flag of the
command that uses it; a flag wins over a variable, a variable over the default. Invalid values are
rejected at start-up with the setting's name. Secrets (`*_PASSWORD`) are never logged and may instead
be read from a file named by the same variable with `_FILE` appended.

This file is generated: `framebus config-docs > docs/configuration.md` (a test checks it is current).

"""


def configuration_reference() -> str:
    """The whole reference as Markdown."""
    from framebus_alerts.settings import AlertsSettings
    from framebus_clips.settings import ClipsSettings, S3Settings
    from framebus_decoder.settings import DecoderSettings
    from framebus_inferencer.settings import InferencerSettings
    from framebus_live.settings import LiveSettings
    from framebus_tools.demo import DemoSettings
    from framebus_tools.perf.loadtest import LoadtestSettings
    from framebus_tools.perf.tune import TuneSettings
    from framebus_tools.render.service import RenderSettings
    from framebus_tracker.settings import TrackerSettings

    service_only = {
        "decoder": DecoderSettings,
        "inferencer": InferencerSettings,
        "track": TrackerSettings,
        "alerts": AlertsSettings,
        "live": LiveSettings,
        "clips": ClipsSettings,
        "demo": DemoSettings,
        "render": RenderSettings,
        "tune": TuneSettings,
        "loadtest": LoadtestSettings,
    }
    parts = [
        HEADER,
        reference_markdown("Kafka connection (every command)", KafkaSettings),
        reference_markdown("Topics (every command)", TopicSettings),
    ]
    for name, cls in service_only.items():
        parts.append(reference_markdown(f"`framebus {name}`", cls, skip_nested=True))
        if cls is ClipsSettings:
            parts.append(reference_markdown("`framebus clips`: an s3:// clips_target", S3Settings))
    parts.append(
        "## `framebus kafka start|stop|status|wipe`\n\n"
        "| Variable | Flag | Default | Meaning |\n|---|---|---|---|\n"
        "| `FRAMEBUS_KAFKA_PORT` | `--port` | `9092` | Broker port on 127.0.0.1; the controller "
        "listens on port+1. |\n"
        "| `FRAMEBUS_HOME` | `--home` | `~/.cache/framebus` | Where the Kafka jars are cached and "
        "where each broker keeps its data and logs (`run/<port>/`). |\n"
    )
    return "\n".join(parts)
