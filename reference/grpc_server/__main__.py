"""Command line: start the reference tl.kv.v1 decode server and print where it listens.

The first line on stdout is `listening on HOST:PORT` (with the OS-assigned port for --port 0),
so a test can start the server and read its address; it runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from concurrent import futures
from types import ModuleType

import grpc

from . import _messages
from ._launch import LISTENING
from ._service import FAULTS, RECEIVE_LIMIT, KvTransferServer, method_handlers

# The Python reference beside this server's package (a patched copy serves its own copy).
DEFAULT_BACKEND = (
    f"py:{(__package__ or 'tlkv_conformance.references.grpc_server').rpartition('.')[0]}.pyref"
)


# tl.kv.v1 has no release, so every block a conformance run stores stays: one full run stores
# about 330 blocks (docs/grpc.md, measured at 4x2x2x8, 16x2x2x64 and 16x16x8x64), and a server
# short of room fails transfer cases. 1024 leaves room for three runs; at the default geometry
# the pool's values are 16 MiB.
DEFAULT_CAPACITY = 1024


def _versions(text: str) -> frozenset[int]:
    try:
        versions = frozenset(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 1,2") from None
    if not versions or not versions <= {1, 2}:
        raise argparse.ArgumentTypeError(f"{text!r}: envelope versions are 1 and 2")
    return versions


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__ or 'tlkv_conformance.references.grpc_server'}",
        description="The reference tl.kv.v1 decode server (docs/grpc.md).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=50051, help="port to bind; 0 lets the OS choose (default 50051)"
    )
    parser.add_argument("--block-tokens", type=_positive, default=16)
    parser.add_argument("--n-layers", type=_positive, default=2)
    parser.add_argument("--n-kv-heads", type=_positive, default=2)
    parser.add_argument("--head-dim", type=_positive, default=64)
    parser.add_argument(
        "--capacity",
        type=_positive,
        default=DEFAULT_CAPACITY,
        help=f"pool capacity in blocks (default {DEFAULT_CAPACITY}; one conformance run stores "
        "about 330, and tl.kv.v1 has no release: docs/grpc.md)",
    )
    parser.add_argument(
        "--read-versions",
        type=_versions,
        default=None,
        help="envelope versions read (and written by PullKv), e.g. 1 or 1,2 (default: the "
        "backend's)",
    )
    parser.add_argument(
        "--no-extensions",
        action="store_true",
        help="offer only HasBlocks and PushKv: GetInfo and PullKv answer UNIMPLEMENTED",
    )
    parser.add_argument(
        "--backend",
        default=DEFAULT_BACKEND,
        help=f"py:MODULE with the Python testee protocol (default {DEFAULT_BACKEND})",
    )
    parser.add_argument(
        "--dedup",
        action="store_true",
        help="a prefix cache: a payload for a hash already held is checked by every reader rule, "
        "then the held block is shared (counted in blocks_reused) instead of stored again",
    )
    # A deliberately wrong server for the suite's own tests; not part of the interface.
    parser.add_argument("--fault", choices=FAULTS, help=argparse.SUPPRESS)
    return parser


def _load_backend(parser: argparse.ArgumentParser, text: str) -> ModuleType:
    kind, _, name = text.partition(":")
    if kind != "py" or not name:
        parser.error(f"--backend {text!r}: expected py:MODULE")
    try:
        return importlib.import_module(name)
    except Exception as exc:
        parser.error(f"--backend {text!r}: cannot import {name}: {type(exc).__name__}: {exc}")
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    backend = _load_backend(parser, args.backend)
    backend_reads = frozenset(int(v) for v in backend.READ_VERSIONS)
    reads = backend_reads if args.read_versions is None else args.read_versions
    if not reads <= backend_reads:
        parser.error(
            f"--read-versions {','.join(map(str, sorted(reads)))}: the backend {args.backend} "
            f"reads only {','.join(map(str, sorted(backend_reads)))}"
        )
    geometry = (args.block_tokens, args.n_layers, args.n_kv_heads, args.head_dim)
    try:
        service = KvTransferServer(
            backend, geometry, args.capacity, reads, args.fault, dedup=args.dedup
        )
    except backend.KvError as exc:
        parser.error(f"the backend refuses a pool of {geometry} x {args.capacity}: {exc}")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.max_receive_message_length", RECEIVE_LIMIT)],
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                _messages.SERVICE, method_handlers(service, not args.no_extensions)
            ),
        )
    )
    try:
        port = server.add_insecure_port(f"{args.host}:{args.port}")
    except RuntimeError as exc:
        parser.error(f"cannot bind {args.host}:{args.port}: {exc}")
    if port == 0:
        parser.error(f"cannot bind {args.host}:{args.port}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    print(f"{LISTENING}{args.host}:{port}", flush=True)
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
