"""The checkout's pytest configuration.

The plugin is `tlkv_conformance.plugin`, loaded through its pytest11 entry
point once the suite is installed (`./suite` installs it into .venv; `pip install -e .` does it
by hand). Loading it here as well would register it twice.
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("tlkv"):
        raise pytest.UsageError(
            "the TLKV conformance plugin is not installed in this Python: run ./suite "
            "conformance, or pip install -e . first"
        )
