"""The reference decode server of tl.kv.v1:
`python -m tlkv_conformance.references.grpc_server --help`.

A real gRPC server over one pool of a backend module with the Python testee protocol (the pyref
module beside it by default). docs/grpc.md describes the service and the decisions it makes
where the spec is silent. It never imports the suite (harness/).
"""

from . import _messages as messages  # the message classes, for the reference prefill client
from ._launch import LISTENING, ServerDidNotStart, launch
from ._service import MAX_PAYLOAD, RECEIVE_LIMIT, KvTransferServer

__all__ = [
    "LISTENING",
    "MAX_PAYLOAD",
    "RECEIVE_LIMIT",
    "KvTransferServer",
    "ServerDidNotStart",
    "launch",
    "messages",
]
