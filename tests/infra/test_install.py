"""The installer's pins agree with each other, and its jar filtering names artifacts right."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

from ground.home import REPO_ROOT
from infra import install


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("kafka-clients-3.9.0.jar", "kafka-clients"),
        ("spark-sql-kafka-0-10_2.13-4.0.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("scala-library-2.13.16.jar", "scala-library"),
        ("zstd-jni-1.5.6-10.jar", "zstd-jni"),
        ("hadoop-client-api-3.4.1.jar", "hadoop-client-api"),
    ],
)
def test_artifact_name_strips_the_version(jar: str, artifact: str) -> None:
    assert install.artifact_name(jar) == artifact


def test_pyspark_and_delta_follow_the_stack_pins() -> None:
    versions = install.load_versions()
    requirements = install.python_requirements(versions)
    assert f"pyspark=={versions['stack']['spark']}" in requirements
    assert f"delta-spark=={versions['stack']['delta']}" in requirements


def test_every_declared_dependency_is_pinned() -> None:
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    pinned = {re.split(r"==", r)[0] for r in install.python_requirements(install.load_versions())}
    assert [d for d in declared if d not in pinned] == []


def test_the_lock_agrees_with_the_pins() -> None:
    lock = {}
    for line in (REPO_ROOT / "infra" / "python.lock").read_text().splitlines():
        name, _, version = line.partition("==")
        lock[name.lower().replace("_", "-")] = version
    for requirement in install.python_requirements(install.load_versions()):
        name, _, version = requirement.partition("==")
        name = re.sub(r"\[.*\]", "", name).lower()
        assert lock.get(name) == version, (
            f"{name}: versions.toml pins {version}, infra/python.lock has {lock.get(name)}"
        )


def test_both_parallel_steps_failing_are_both_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(what: str) -> object:
        def step(*_: object) -> None:
            raise install.InstallError(f"{what} failed")

        return step

    monkeypatch.setattr(install, "virtualenv", fails("pip"))
    monkeypatch.setattr(install, "jars", fails("maven"))
    assert install.main(["--skip-system", "--for", "test"]) == 1
    said = capsys.readouterr().err
    assert "[install] error: pip failed" in said
    assert "[install] error: maven failed" in said


@pytest.mark.parametrize(("purpose", "browser"), [("demo", False), ("test", True)])
def test_the_demo_installs_no_browser_and_the_tests_do(
    monkeypatch: pytest.MonkeyPatch, purpose: str, browser: bool
) -> None:
    """Chromium is the tests' alone (they open the status page in it): `make demo` does not wait for it."""
    ran: list[list[str]] = []
    monkeypatch.setattr(install, "run", lambda cmd, *_, **__: ran.append(cmd))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(Path, "exists", lambda _: False)  # a bare machine
    install.system_packages(install.load_versions(), tests=purpose == "test")
    [apt] = [cmd for cmd in ran if cmd[:2] == ["apt-get", "install"]]
    assert ("chromium" in apt) is browser
    assert "prometheus" in apt
