"""The TLKV conformance harness.

- `harness.oracle`: the suite's own codec (hashing, envelopes, reader rules).
- `harness.adapters`: the ways in to an implementation (Python module, C library, gRPC).
- `harness.cases`: YAML conformance cases.
- `harness.plugin`: the pytest plugin that ties them together.
"""
