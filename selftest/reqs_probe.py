"""A pytest plugin for the self-tests: after collection, write each item's requirement ids and
level (as the harness recorded them) to the JSON file named by TLKV_REQS_PROBE."""

from __future__ import annotations

import json
import os

import pytest
from tlkv_conformance.runstate import TESTED


def pytest_collection_finish(session: pytest.Session) -> None:
    out = os.environ["TLKV_REQS_PROBE"]
    tests = [item.stash[TESTED] for item in session.items if TESTED in item.stash]
    table = {t.nodeid: {"reqs": list(t.reqs), "level": t.level} for t in tests if t.level}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(table, handle)
