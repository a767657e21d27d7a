"""Apache Kafka's jars for the embedded local Kafka, resolved from Maven Central once.

Maven resolves `org.apache.kafka:kafka_2.13` and its runtime dependencies, plus a log4j2 binding,
into a user cache; a marker file says the copy completed, so later starts need no network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from framebus.errors import LocalKafkaError

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.25.3"
SLF4J_VERSION = "2.0.17"
COMPLETE_MARKER = ".complete"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.framebus</groupId><artifactId>local-kafka</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId>
      <version>{slf4j}</version></dependency>
  </dependencies>
</project>
"""


def kafka_libs_dir(home: Path) -> Path:
    """Where the Kafka jars are cached under the cache root `home`."""
    return home / f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}" / "libs"


def ensure_kafka_jars(libs_dir: Path) -> Path:
    """Resolve Kafka's jars with Maven into `libs_dir` once; later calls use the cache."""
    if (libs_dir / COMPLETE_MARKER).exists():
        return libs_dir
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalKafkaError(
            "Maven is needed once to fetch Apache Kafka's jars, and `mvn` is not on PATH. "
            "Install it: `sudo apt-get install maven` (Debian/Ubuntu), `brew install maven` "
            "(macOS), or see https://maven.apache.org/install.html"
        )
    work = libs_dir.parent
    work.mkdir(parents=True, exist_ok=True)
    pom = work / "pom.xml"
    pom.write_text(
        POM.format(
            scala=SCALA_VERSION, kafka=KAFKA_VERSION, log4j=LOG4J_VERSION, slf4j=SLF4J_VERSION
        ),
        encoding="utf-8",
    )
    staging = work / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    print(
        f"fetching Apache Kafka {KAFKA_VERSION} jars with Maven into {libs_dir} ...",
        file=sys.stderr,
    )
    proc = subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise LocalKafkaError(
            f"Maven could not fetch org.apache.kafka:kafka_{SCALA_VERSION}:{KAFKA_VERSION} "
            f"(exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
    shutil.rmtree(libs_dir, ignore_errors=True)
    staging.rename(libs_dir)
    (libs_dir / COMPLETE_MARKER).write_text(KAFKA_VERSION, encoding="utf-8")
    return libs_dir
