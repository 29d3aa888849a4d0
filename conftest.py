"""The TLKV conformance suite's pytest configuration: everything lives in harness.plugin."""

pytest_plugins = ["harness.plugin"]
