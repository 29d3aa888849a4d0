"""A pytest plugin for the self-tests: after collection, write each item's requirement ids and
level (as the harness recorded them) to the JSON file named by TLKV_REQS_PROBE."""

from __future__ import annotations

import json
import os

import pytest
from tlkv_conformance.runstate import REQS


def pytest_collection_finish(session: pytest.Session) -> None:
    out = os.environ["TLKV_REQS_PROBE"]
    table = {
        item.nodeid: {"reqs": list(item.stash[REQS][0]), "level": item.stash[REQS][1]}
        for item in session.items
        if REQS in item.stash
    }
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(table, handle)
