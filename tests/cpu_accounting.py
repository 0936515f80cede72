"""Where the suite's CPU goes: an opt-in pytest plugin that charges each test the CPU (user +
sys) of its process and of every child it waited for, setup and teardown included.

    python -m pytest -p tests.cpu_accounting --cpu-report=cpu.tsv      # any -n works
    sort -t$'\t' -k2 -rn cpu.tsv | head -30

Each xdist worker runs its tests one after another, so a delta of its own getrusage
(RUSAGE_SELF + RUSAGE_CHILDREN) is the test's cost; every worker appends to the file. A
module-scoped fixture is charged to the first test that uses it. The start-up of the workers
(imports) is nobody's and is not in the file: compare the file's sum with
benchmarks/suite_cpu.py's total.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any, Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-report",
        metavar="PATH",
        default=None,
        help="Append `test<TAB>cpu seconds<TAB>wall-free pid` per test to PATH.",
    )


def cpu_seconds() -> float:
    """User + sys CPU of this process and of its waited-for children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    path = item.config.getoption("--cpu-report")
    before = cpu_seconds()
    yield
    if path:
        with Path(path).open("a", encoding="utf-8") as report:
            report.write(f"{item.nodeid}\t{cpu_seconds() - before:.3f}\t{os.getpid()}\n")
