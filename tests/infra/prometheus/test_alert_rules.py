"""The alert rules shipped in infra/prometheus/: valid, each one tested firing and not firing (promtool)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).parent
RULES = HERE.parents[2] / "infra" / "prometheus" / "cdcpipe-alerts.yml"
TESTS = HERE / "alerts_test.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: `make install` installs Debian's prometheus, which has it")
    return found


def test_the_rules_file_is_valid() -> None:
    checked = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_every_alert_fires_where_it_should_and_nowhere_else() -> None:
    ran = subprocess.run(
        [promtool(), "test", "rules", TESTS.name], cwd=HERE, capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_every_alert_has_a_test_that_fires_it_and_one_where_it_is_quiet() -> None:
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"] for c in t["alert_rule_test"]]
    fired = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert alerts - fired == set(), "alerts no test fires"
    assert alerts - quiet == set(), "alerts no test sees quiet"
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert {"summary", "fix"} <= set(rule["annotations"]), f"{rule['alert']}: say what and how to fix"
