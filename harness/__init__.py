"""The TLKV conformance suite (import name `tlkv_conformance`; harness/ in a checkout).

- `oracle`: the suite's own codec (hashing, envelopes, reader rules).
- `adapters`: the ways in to an implementation (Python module, C library, gRPC).
- `cases`: YAML conformance cases, one module per kind (`cases.kinds`).
- `plugin`: the pytest plugin (loaded through the pytest11 entry point `tlkv`).
- `report`: the conformance report and the gate.
- `references`, `generators`: the bundled implementations, the vector generators.
- `corpus`: where the bundled cases, conformance tests and golden blobs live.
- `cli`: the `tlkv-conformance` command.
"""

__version__ = "0.2.0"
