"""Say which release of a dependency the tests run against, beside the newest one its range admits.

    python .ci/newest_in_range.py transformers

Reads the requirement from pyproject.toml, lists the index's releases with ``pip index versions``
and prints the newest the range admits next to the installed one. They differ when the newest
release cannot be installed with the other requirements (a dependency it needs is not published);
pip's resolver then installed the newest one that can be.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def declared_requirements() -> list[Requirement]:
    """Framewise's runtime dependencies with their ranges, as pyproject.toml declares them."""
    return [Requirement(text) for text in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]]


def declared_requirement(name: str) -> Requirement:
    (requirement,) = [r for r in declared_requirements() if r.name == name]
    return requirement


def listed_versions(name: str) -> list[Version]:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True, check=True
    ).stdout
    line = next(line for line in listing.splitlines() if line.startswith("Available versions:"))
    versions = []
    for text in line.split(":", 1)[1].split(","):
        try:
            versions.append(Version(text.strip()))
        except InvalidVersion:
            continue
    return versions


def main(name: str) -> None:
    requirement = declared_requirement(name)
    admitted = [v for v in listed_versions(name) if requirement.specifier.contains(v)]
    newest = max(admitted)
    installed = Version(importlib.metadata.version(name))
    print(f"{name}: pyproject admits {requirement.specifier}; newest listed {newest}; installed {installed}")
    if installed != newest:
        newer = ", ".join(str(v) for v in sorted(admitted) if v > installed)
        print(f"{name}: {newer} listed but not installable with the other requirements; testing {installed}")


if __name__ == "__main__":
    main(sys.argv[1])
