"""Install whatever the local stack is missing: Debian packages, the virtual environment, the jars.

Run by `make install` (and so by `make test` and `make demo`) with the machine's own python3, before any
virtual environment exists, so this file uses the standard library only. Every version comes from
infra/versions.toml. Each step leaves a stamp (a hash of the files it was installed from) and is skipped
while its stamp still matches, so a warm run costs a second and a changed pin reinstalls only its part.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INFRA = REPO / "infra"
VERSIONS_FILE = INFRA / "versions.toml"
JARS_POM = INFRA / "jars.pom.xml"
TRANSFORMS = REPO / "connectors" / "transforms"  # our own Connect transforms, built from source
MAVEN_SETTINGS = INFRA / "maven-settings.xml"
# The whole dependency closure at the versions tested (`make lock` writes it), so a transitive
# dependency cannot move under us between two machines.
PYTHON_LOCK = INFRA / "python.lock"
VENV = Path(os.environ.get("CDCPIPE_VENV", REPO / ".venv"))
# Must agree with ground.home.default_home(); this file cannot import the package it installs.
HOME = Path(os.environ.get("CDCPIPE_HOME", REPO / ".stack")).resolve()
LIB = HOME / "lib"

# Maven profile in jars.pom.xml -> folder under LIB. The Debezium folder is one plugin on plugin.path.
JAR_PROFILES = {
    "kafka": LIB / "kafka",
    "connect": LIB / "connect",
    "debezium-postgres": LIB / "plugins" / "debezium-connector-postgres",
    "spark": LIB / "spark",
    "s3proxy": LIB / "s3proxy",
    "jmx-exporter": LIB / "jmx-exporter",
}
TRANSFORMS_PLUGIN = LIB / "plugins" / "cdcpipe-transforms"


class InstallError(Exception):
    """An install step failed; the message says which and what to do."""


def log(message: str) -> None:
    """Print one progress line."""
    print(f"[install] {message}", flush=True)


def load_versions() -> dict[str, dict[str, str]]:
    """The parsed infra/versions.toml."""
    with VERSIONS_FILE.open("rb") as f:
        return tomllib.load(f)


def digest(*parts: bytes) -> str:
    """A stamp value: the hash of what a step was installed from."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
        h.update(b"\0")
    return h.hexdigest()


def stamp_matches(stamp: Path, value: str) -> bool:
    """Whether the step behind `stamp` was installed from exactly `value`."""
    return stamp.is_file() and stamp.read_text().strip() == value


def run(cmd: list[str], what: str, **kwargs: object) -> None:
    """Run a command; on failure raise with its last output lines, so the cause is on screen."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        raise InstallError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


# --- Debian packages ----------------------------------------------------------------------------


def system_packages(versions: dict[str, dict[str, str]], *, tests: bool) -> None:
    """Install the Debian packages that are missing: PostgreSQL's server, kcat, acl, Prometheus, Java, Maven.

    For the tests, Chromium too.
    """
    pg_major = versions["stack"]["postgres_major"]
    wanted = {
        f"postgresql-{pg_major}": Path(f"/usr/lib/postgresql/{pg_major}/bin/postgres"),
        "kcat": Path("/usr/bin/kcat"),
        # setfacl: started as root, the stack shares its lake with the Spark executors' user (infra/service_user.py)
        "acl": Path("/usr/bin/setfacl"),
        # The stack's Prometheus, and promtool, which the alert rules' unit tests run.
        "prometheus": Path("/usr/bin/promtool"),
    }
    if tests:  # a headless browser: the tests open the stack's status page in it, as a person would
        wanted["chromium"] = Path("/usr/bin/chromium")
    missing = [pkg for pkg, probe in wanted.items() if not probe.exists()]
    if shutil.which("java") is None:
        missing.append("openjdk-17-jre-headless")
    if shutil.which("mvn") is None:
        missing.append("maven")
    if not missing:
        log("Debian packages: present")
        return
    if os.geteuid() != 0:
        raise InstallError(
            f"missing Debian packages {', '.join(missing)} and not running as root: "
            f"run `sudo apt-get install -y {' '.join(missing)}`, then `make install` again"
        )
    log(f"Debian packages: installing {', '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-q"], "apt-get update", env=env)
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], "apt-get install", env=env)


# --- Python virtual environment -----------------------------------------------------------------


def python_requirements(versions: dict[str, dict[str, str]]) -> list[str]:
    """Every pinned Python requirement, pyspark and delta-spark included."""
    stack = versions["stack"]
    pins = [f"{name}=={version}" for name, version in versions["python"].items()]
    return [*pins, f"pyspark=={stack['spark']}", f"delta-spark=={stack['delta']}"]


def open_to_all(path: Path) -> bool:
    """Whether any user may run `path`: it and every folder above it have x for others."""
    return all(os.stat(p).st_mode & 0o001 for p in (path, *path.parents))


def venv_base() -> Path:
    """The interpreter to make the virtual environment from: one that every user may run.

    A venv's python is a link to the interpreter it was made from, and the stack's Python services run as users
    of their own when it is started as root (the collector; Spark's Python workers on the cluster): an interpreter
    under a folder others cannot enter (pyenv's under /root) is one they cannot start. The machine's own
    interpreter of the same version (the same wheels) is taken instead, if it has `venv`.
    """
    mine = Path(sys.executable).resolve()
    if open_to_all(mine):
        return mine
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for folder in ("/usr/bin", "/usr/local/bin"):
        other = Path(folder) / name
        if other.exists() and open_to_all(other.resolve()):
            probe = subprocess.run([str(other), "-c", "import venv, ensurepip"], capture_output=True, check=False)
            if probe.returncode == 0:
                return other
    log(
        f"virtual environment: {mine} is in a folder other users cannot enter, and no {name} they may run has "
        "`venv`: started as root, the collector would be refused; install it (Debian: python3-venv)"
    )
    return mine


def virtualenv(versions: dict[str, dict[str, str]]) -> None:
    """Create the virtual environment and install the pins and cdcpipe (editable) into it."""
    requirements = python_requirements(versions)
    lock = PYTHON_LOCK.read_bytes() if PYTHON_LOCK.exists() else b""
    base = venv_base()
    wanted = digest(
        VERSIONS_FILE.read_bytes(), lock, (REPO / "pyproject.toml").read_bytes(), str(VENV).encode(), str(base).encode()
    )
    stamp = VENV / ".cdcpipe-installed"
    if stamp_matches(stamp, wanted):
        log(f"virtual environment: up to date ({VENV})")
        return
    started = time.monotonic()
    config = VENV / "pyvenv.cfg"
    if config.exists() and f"home = {base.parent}\n" not in config.read_text():
        log(f"virtual environment: made from another interpreter; making it again from {base}")
        shutil.rmtree(VENV)
    if not (VENV / "bin" / "python").exists():
        run([str(base), "-m", "venv", str(VENV)], f"creating the virtual environment (from {base})")
    # --no-compile: Python compiles what a process imports, once (into __pycache__); compiling all of pyspark up
    # front took a third of the install.
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-compile"]
    log(f"virtual environment: installing {len(requirements)} pinned packages (pyspark is ~430 MB)")
    constraints = ["-c", str(PYTHON_LOCK)] if PYTHON_LOCK.exists() else []
    run([*pip, *constraints, *requirements], "pip install of the pinned packages")
    # Editable, so `cdcpipe` runs the working tree. --no-deps: every dependency was just installed at its
    # pin (a unit test checks that pyproject.toml names nothing versions.toml does not pin).
    run([*pip, "--no-deps", "--no-build-isolation", "-e", str(REPO)], "pip install of cdcpipe")
    stamp.write_text(wanted + "\n")
    log(f"virtual environment: done in {time.monotonic() - started:.0f}s")


def pyspark_jar_names() -> set[str]:
    """Artifact names (version stripped) of the jars pyspark already ships."""
    out = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {artifact_name(p.name) for p in (Path(out) / "jars").glob("*.jar")}


def artifact_name(jar: str) -> str:
    """`kafka-clients-3.9.0.jar` -> `kafka-clients`: the name before the first `-<digits>.<digits>`.

    Not simply the first dash before a digit: `spark-sql-kafka-0-10_2.13-4.0.0.jar` has digits in its name.
    """
    stem = jar.removesuffix(".jar")
    match = re.match(r"^(.*?)-\d+\.\d+", stem)
    return match.group(1) if match else stem


# --- Jars from Maven Central -------------------------------------------------------------------------


def jars(versions: dict[str, dict[str, str]], profiles: tuple[str, ...] = tuple(JAR_PROFILES)) -> None:
    """Resolve each jar folder of `profiles` with Maven, into a staging folder that replaces the old one whole.

    Spark's needs the virtual environment (pyspark's own jars are left out of it); the others do not.
    """
    stack = versions["stack"]
    props = {
        "version.maven.dependency.plugin": stack["maven_dependency_plugin"],
        "scala.binary": stack["scala_binary"],
        "version.kafka": stack["kafka"],
        "version.log4j": stack["log4j"],
        "version.debezium": stack["debezium"],
        "version.spark": stack["spark"],
        "version.delta": stack["delta"],
        "version.hadoop": stack["hadoop"],
        "version.aws.sdk": stack["aws_sdk"],
        "version.s3proxy": stack["s3proxy"],
        "version.jmx.exporter": stack["jmx_exporter"],
        "version.s3proxy.jackson.annotations": stack["s3proxy_jackson_annotations"],
    }
    wanted = digest(VERSIONS_FILE.read_bytes(), JARS_POM.read_bytes(), MAVEN_SETTINGS.read_bytes())
    for profile in profiles:
        folder = JAR_PROFILES[profile]
        stamp = folder.parent / f".{folder.name}.installed"
        if stamp_matches(stamp, wanted) and folder.is_dir():
            log(f"jars {profile}: up to date ({folder})")
            continue
        started = time.monotonic()
        staging = folder.with_name(folder.name + ".staging")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [
            "mvn",
            "-q",
            "-B",
            "-s",
            str(MAVEN_SETTINGS),
            "-f",
            str(JARS_POM),
            f"-P{profile}",
            *[f"-D{k}={v}" for k, v in props.items()],
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
        ]
        log(f"jars {profile}: resolving with Maven")
        run(cmd, f"Maven resolution of the {profile} jars")
        if profile == "spark":
            # Spark ships its own Scala, Hadoop client, compression codecs and slf4j binding; a second
            # copy on the classpath wins or loses by accident, so only what Spark lacks is kept.
            shipped = pyspark_jar_names()
            for jar in staging.glob("*.jar"):
                if artifact_name(jar.name) in shipped:
                    jar.unlink()
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(folder)
        stamp.write_text(wanted + "\n")
        count = len(list(folder.glob("*.jar")))
        log(f"jars {profile}: {count} jars in {time.monotonic() - started:.0f}s")


def transforms(versions: dict[str, dict[str, str]]) -> None:
    """Build connectors/transforms/ (cdcpipe's Connect plugins) into a plugin folder of its own."""
    stack = versions["stack"]
    sources = sorted(p for p in TRANSFORMS.rglob("*") if p.is_file() and "target" not in p.parts)
    wanted = digest(VERSIONS_FILE.read_bytes(), MAVEN_SETTINGS.read_bytes(), *(p.read_bytes() for p in sources))
    stamp = TRANSFORMS_PLUGIN.parent / f".{TRANSFORMS_PLUGIN.name}.installed"
    if stamp_matches(stamp, wanted) and any(TRANSFORMS_PLUGIN.glob("*.jar")):
        log(f"transforms: up to date ({TRANSFORMS_PLUGIN})")
        return
    started = time.monotonic()
    build = LIB / "build" / "transforms"
    shutil.rmtree(build, ignore_errors=True)
    props = {
        "version.kafka": stack["kafka"],
        "version.maven.resources.plugin": stack["maven_resources_plugin"],
        "version.maven.compiler.plugin": stack["maven_compiler_plugin"],
        "version.maven.surefire.plugin": stack["maven_surefire_plugin"],
        "version.maven.jar.plugin": stack["maven_jar_plugin"],
        "build.dir": str(build),
    }
    log("transforms: building with Maven")
    run(
        ["mvn", "-q", "-B", "-s", str(MAVEN_SETTINGS), "-f", str(TRANSFORMS / "pom.xml")]
        + [f"-D{k}={v}" for k, v in props.items()]
        + ["-DskipTests", "package"],
        "Maven build of connectors/transforms",
    )
    shutil.rmtree(TRANSFORMS_PLUGIN, ignore_errors=True)
    TRANSFORMS_PLUGIN.mkdir(parents=True)
    for jar in build.glob("*.jar"):
        shutil.copy2(jar, TRANSFORMS_PLUGIN / jar.name)
    stamp.write_text(wanted + "\n")
    log(f"transforms: built in {time.monotonic() - started:.0f}s")


def kcat() -> None:
    """`.stack/bin/kcat`: the system's kcat on the librdkafka confluent-kafka ships.

    Debian bookworm's kcat links librdkafka 2.0.2, whose SCRAM client-final message Kafka 4 rejects (fixed in
    librdkafka 2.6.1, confluentinc/librdkafka#4895); the library keeps its ABI, so the same kcat on the newer
    library authenticates.
    """
    system_kcat = shutil.which("kcat", path="/usr/bin:/usr/local/bin")
    bundled = sorted((VENV / "lib").glob("python3*/site-packages/confluent_kafka.libs/librdkafka*.so*"))
    if system_kcat is None or not bundled:
        log("kcat: no system kcat or no librdkafka in the virtual environment; .stack/bin/kcat not made")
        return
    libs, wrapper = LIB / "librdkafka", HOME / "bin" / "kcat"
    libs.mkdir(parents=True, exist_ok=True)
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    link = libs / "librdkafka.so.1"
    link.unlink(missing_ok=True)
    link.symlink_to(bundled[-1])
    wrapper.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH="{libs}" exec "{system_kcat}" "$@"\n')
    wrapper.chmod(0o755)
    log(f"kcat: {wrapper} runs {system_kcat} on {bundled[-1].name}")


def main(argv: list[str] | None = None) -> int:
    """Install every missing part; exit 1 with the failing step named."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-system", action="store_true", help="do not check or install Debian packages")
    parser.add_argument(
        "--for",
        dest="purpose",
        choices=("demo", "test"),
        default="test",
        help="what to install for: the demo (the stack and the pipeline), or the tests too (a headless browser); "
        "the Spark driver's class archive is `python -m streaming_jobs.class_archive`'s (make install runs both)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    versions = load_versions()
    try:

        def java_side() -> None:
            if not args.skip_system:
                system_packages(versions, tests=args.purpose == "test")  # Java and Maven, if missing, come from there
            jars(versions, tuple(p for p in JAR_PROFILES if p != "spark"))
            transforms(versions)

        # The virtual environment (a minute on a fresh machine, pip building pyspark) needs none of the Debian
        # packages or Maven's jars: on a fresh machine they are fetched meanwhile, a third of the install.
        with ThreadPoolExecutor(max_workers=2) as pool:
            both = [pool.submit(virtualenv, versions), pool.submit(java_side)]
        failed = [error for step in both if (error := step.exception()) is not None]
        if any(not isinstance(error, InstallError) for error in failed):
            raise next(error for error in failed if not isinstance(error, InstallError))
        if failed:  # each step's cause, not the first alone: both may fail (say, no network)
            raise InstallError("\n[install] error: ".join(str(error) for error in failed))
        kcat()
        jars(versions, ("spark",))
    except InstallError as exc:
        print(f"[install] error: {exc}", file=sys.stderr)
        return 1
    log(f"everything installed in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
