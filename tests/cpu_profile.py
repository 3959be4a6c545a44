"""Opt-in pytest plugin that records the CPU time and wall time of each test and fixture setup.

Enable it with ``pytest -p tests.cpu_profile``; records go, one JSON object a line, to the file named by
``EDGEOPT_CPU_PROFILE`` (default ``.pytest_cache/cpu_profile.jsonl``), appended as the run goes so partial results
can be read while it runs. CPU time is user + system of this process and of its waited-for children.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

_PATH = os.environ.get("EDGEOPT_CPU_PROFILE", ".pytest_cache/cpu_profile.jsonl")


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _write(record: dict) -> None:
    record["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.makedirs(os.path.dirname(_PATH) or ".", exist_ok=True)
    with open(_PATH, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu0, wall0 = _cpu(), time.perf_counter()
    outcome = yield
    _write({"kind": "test", "id": item.nodeid, "cpu": round(_cpu() - cpu0, 3),
            "wall": round(time.perf_counter() - wall0, 3)})
    return outcome


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    cpu0, wall0 = _cpu(), time.perf_counter()
    outcome = yield
    cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    if cpu > 0.5 or wall > 0.5:
        _write({"kind": "fixture", "id": fixturedef.argname, "scope": fixturedef.scope,
                "test": request.node.nodeid, "cpu": round(cpu, 3), "wall": round(wall, 3)})
    return outcome


def pytest_sessionstart(session):
    _write({"kind": "start", "cpu": round(_cpu(), 3), "time": time.time()})


def pytest_sessionfinish(session, exitstatus):
    _write({"kind": "end", "cpu": round(_cpu(), 3), "time": time.time(), "exit": int(exitstatus)})
