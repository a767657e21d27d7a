"""The gate a schema change passes: it is recorded as a released version and stays compatible.

Every record type's current schema (`schemas/<name>.avsc`) must read the records of every released
version (`schemas/released-versions/<name>/v<N>.avsc`), and every released version must read the
current schema's records; the current schema must be the newest released version on the wire; and a
released version never changes. docs/architecture.md, "Schema evolution", says how to change one.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path, PurePosixPath

import pytest

from framebus.codec import (
    RELEASED_DIR,
    SCHEMAS_DIR,
    SchemaVersion,
    load_schema,
    released_versions,
    schema_fingerprint,
)
from tests.unit.framebus.avro_compat import compatibility_problems

REPO = Path(__file__).resolve().parents[3]
THIS_FILE = Path(__file__).resolve().relative_to(REPO).as_posix()
RECORDS = ("frame", "detections", "alert", "tracks", "video", "clip")
# The wire fingerprint of each released version, oldest first. Records of a released version sit on
# the topics: if its file changed, readers would no longer know their fingerprint. Releasing a
# version adds its fingerprint here (the failing test below prints the line).
RELEASED_FINGERPRINTS = {
    "frame": ["b160929e0b2a02c6", "8ded16468e4647ba", "02dbcb571ca2e7bb"],
    "detections": ["beaa09e0af738069", "f4278de7b444ad4c"],
    "alert": ["e7724fcf8e4adbbd", "c59dfe9547cdb006"],
    "tracks": ["c8e3aa6b2206ad27", "1d980736f5688535"],
    "video": ["ed139105623d03b1"],
    "clip": ["0362cdec62571438"],
}
HOW = "How to change a schema: docs/architecture.md, section 'Schema evolution'."


def shown(path: Path) -> str:
    """A schema file as the repository shows it: schemas/..."""
    return f"schemas/{path.relative_to(SCHEMAS_DIR).as_posix()}"


def fp(version: SchemaVersion) -> str:
    return schema_fingerprint(version.schema).hex()


VERSIONS = [v for name in RECORDS for v in released_versions(name)]


@pytest.mark.parametrize("old", VERSIONS, ids=lambda v: f"{v.name}-v{v.version}")
def test_current_schema_when_reading_records_of_a_released_version_then_resolves(
    old: SchemaVersion,
) -> None:
    problems = compatibility_problems(old.schema, load_schema(old.name))
    assert not problems, (
        f"schemas/{old.name}.avsc cannot read records written with {shown(old.path)}, "
        "so the records already on the topic would be dead-lettered:\n  "
        + "\n  ".join(problems)
        + f"\nAdd fields with a default; never remove, rename or retype one. {HOW}"
    )


@pytest.mark.parametrize("old", VERSIONS, ids=lambda v: f"{v.name}-v{v.version}")
def test_released_version_when_reading_records_of_current_schema_then_resolves(
    old: SchemaVersion,
) -> None:
    problems = compatibility_problems(load_schema(old.name), old.schema)
    assert not problems, (
        f"{shown(old.path)} cannot read records written with schemas/{old.name}.avsc, so a "
        "reader of that release could not read them even when handed the new schema:\n  "
        + "\n  ".join(problems)
        + f"\nRemove only fields that have a default; add enum symbols only to an enum with a "
        f"default. {HOW}"
    )


@pytest.mark.parametrize("name", RECORDS)
def test_current_schema_when_changed_on_the_wire_then_recorded_as_newest_released_version(
    name: str,
) -> None:
    versions = released_versions(name)
    current = schema_fingerprint(load_schema(name)).hex()
    if versions and fp(versions[-1]) == current:
        return
    newest = f"{shown(versions[-1].path)} is {fp(versions[-1])}" if versions else "none is kept"
    number = len(versions) + 1
    pytest.fail(
        f"schemas/{name}.avsc ({current}) differs on the wire from its newest released version "
        f"({newest}). To ship this change as version {number}:\n"
        f"  cp schemas/{name}.avsc schemas/{RELEASED_DIR}/{name}/v{number}.avsc\n"
        f'  add "{current}" to RELEASED_FINGERPRINTS["{name}"] in {THIS_FILE}\n'
        "Edits of docs and defaults only keep the fingerprint and need no new version. " + HOW
    )


@pytest.mark.parametrize("name", RECORDS)
def test_released_versions_when_listed_then_numbered_from_1_and_unchanged_since_release(
    name: str,
) -> None:
    versions, pinned = released_versions(name), RELEASED_FINGERPRINTS[name]
    problems = []
    if [v.version for v in versions] != list(range(1, len(versions) + 1)):
        numbers = [v.version for v in versions]
        problems.append(f"versions {numbers} are not 1..{len(versions)}: none is ever removed")
    for version, was in zip(versions, pinned, strict=False):
        if fp(version) != was:
            problems.append(
                f"{shown(version.path)} is {fp(version)} on the wire, released as {was}: the "
                "records it wrote would become unreadable. Restore it; put the change in a new "
                "version."
            )
    problems += [
        f'{shown(v.path)} is not pinned: add "{fp(v)}" to RELEASED_FINGERPRINTS["{name}"].'
        for v in versions[len(pinned) :]
    ]
    problems += [
        f"version {n} ({was}) is gone from schemas/{RELEASED_DIR}/{name}/: none is ever removed."
        for n, was in enumerate(pinned[len(versions) :], start=len(versions) + 1)
    ]
    assert not problems, "\n".join(problems) + f"\n{HOW}"


def test_package_data_when_wheel_is_built_then_every_released_version_ships() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["framebus.schemas"]
    released = [
        PurePosixPath(p.relative_to(REPO / "schemas").as_posix())
        for p in (REPO / "schemas" / RELEASED_DIR).rglob("*")
        if p.is_file()
    ]
    assert len(released) >= len(RECORDS)
    unshipped = [str(p) for p in released if not any(_glob_match(p, pat) for pat in patterns)]
    assert not unshipped, f"not in package-data 'framebus.schemas' {patterns}: {unshipped}"


def _glob_match(path: PurePosixPath, pattern: str) -> bool:
    # setuptools globs each pattern from the package folder: `*` stays within one folder.
    parts = PurePosixPath(pattern).parts
    return len(parts) == len(path.parts) and all(map(fnmatch.fnmatchcase, path.parts, parts))
