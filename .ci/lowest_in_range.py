"""Print a pip constraints file that pins each of Framewise's dependencies to the oldest release its range admits.

    python .ci/lowest_in_range.py [--keep torch] > lowest.txt

Reads the ranges from pyproject.toml and the releases from the package index (``pip index
versions``). A dependency named with ``--keep`` is left out, so another constraints file decides
it: torch, whose oldest admitted release is checked on the GPU machine rather than here.
"""

from __future__ import annotations

import argparse
import sys

from packaging.requirements import Requirement

from newest_in_range import declared_requirements, listed_versions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="append", default=[], help="a dependency to leave to other constraints")
    args = parser.parse_args(argv)
    for requirement in declared_requirements():
        if requirement.name in args.keep:
            continue
        admitted = [v for v in listed_versions(requirement.name) if requirement.specifier.contains(v)]
        if not admitted:
            sys.exit(f"no listed release of {requirement.name} satisfies {requirement.specifier}")
        print(f"{requirement.name}=={min(admitted)}")


if __name__ == "__main__":
    main()
