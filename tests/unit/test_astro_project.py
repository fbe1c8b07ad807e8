"""The Astro project files agree with the pinned environment the tests run in."""

from __future__ import annotations

import re

from tests.support.env import ROOT


def pinned_airflow() -> str:
    text = (ROOT / "requirements-dev.txt").read_text()
    found = re.search(r"^apache-airflow==([0-9][^\s;#]*)", text, flags=re.MULTILINE)
    assert found, "requirements-dev.txt pins no apache-airflow=="
    return found.group(1)


def test_the_dockerfile_builds_the_pinned_airflow() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(
        r"^FROM astrocrpublic\.azurecr\.io/runtime:(\d+)\.(\d+)-(\d+)\s*$",
        dockerfile,
        flags=re.MULTILINE,
    )
    assert base, (
        "the Dockerfile must start FROM an Astro Runtime 3 image (runtime:<major.minor>-<patch>)"
    )
    declared = re.search(r"^ARG AIRFLOW_VERSION=(\S+)$", dockerfile, flags=re.MULTILINE)
    assert declared, "the Dockerfile declares no AIRFLOW_VERSION to check the image against"
    pinned = pinned_airflow()
    assert declared.group(1) == pinned, (
        f"Dockerfile AIRFLOW_VERSION {declared.group(1)} but requirements-dev.txt pins {pinned}"
    )
    minor = f"{base.group(1)}.{base.group(2)}"
    assert minor == ".".join(pinned.split(".")[:2]), (
        f"runtime:{minor}-… carries Airflow {minor}.x, not the pinned {pinned}"
    )
    assert "airflow.__version__" in dockerfile, "the build checks the image's Airflow version"


def test_requirements_leave_airflow_to_the_image() -> None:
    runtime = (ROOT / "requirements.txt").read_text()
    assert not re.search(r"^apache-airflow[=<>~ ]", runtime, flags=re.MULTILINE), (
        "requirements.txt is installed on top of the Astro Runtime image: no apache-airflow"
    )


def test_local_state_stays_out_of_the_image() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".local", ".venv", ".git"} <= ignored
    assert "tests" not in ignored, "astro dev pytest runs the tests inside the image"
    assert "devtools" not in ignored, "the tests inside the image import devtools"
