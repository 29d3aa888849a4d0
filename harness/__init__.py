"""The TLKV conformance suite (import name `tlkv_conformance`; harness/ in a checkout).

What corpus tests (the bundled ones and a user's) and users may import is in `__all__`:

- `oracle`: the suite's own codec (hashing, envelopes, reader rules).
- `adapters`: the ways in to an implementation (Python module, C library, gRPC).
- `testee`: the implementation under test, as a case sees it.
- `runstate`: what a corpus test reads of the run (its implementations, the parity roots).
- `cases`, `checks`, `evidence`, `errors`: building a case, checking an answer, the evidence
  a failure carries, the errors an implementation's answer becomes.
- `diagnosis`: a failure's blame and probable causes, from its evidence.
- `exprs`, `golden`, `strategies`: geometries, golden-vector manifests, hypothesis strategies.
- `corpus`: where the bundled cases, conformance tests and golden blobs live.
- `references`, `generators`: the bundled implementations, the vector generators.
- `grpc_stubs`: tl.kv.v1's generated protobuf modules (`kv_pb2`, `kv_pb2_grpc`), for a client
  or server written in Python.

Every other module is the suite's own (the pytest plugin, loaded through the pytest11 entry
point `tlkv`; the gate and the reports; the `tlkv-conformance` command) and may change in any
release. docs/layers.md shows how they are layered.
"""

__version__ = "0.2.0"

__all__ = [
    "__version__",
    "adapters",
    "cases",
    "checks",
    "corpus",
    "diagnosis",
    "errors",
    "evidence",
    "exprs",
    "generators",
    "golden",
    "grpc_stubs",
    "oracle",
    "references",
    "runstate",
    "strategies",
    "testee",
]
