"""A prefill-client harness: the reference prefill client behind the suite's JSON-lines protocol
(docs/contract.md, "A prefill client as a harness process"), run by
`--impl="prefill-exec:.venv/bin/python -m tlkv_conformance.references.prefill_harness"` (the
suite's interpreter, named: a bare `python` is whichever the PATH finds).

It is also the example an engine team copies: replace `prefill_client.push` with a call into
your own client library (it gets the job, and returns the server's counts or the status the
push ended with), and say what your client writes in `GREETING`. Only answers go to stdout, one
JSON object a line; logs go to stderr.
"""

from __future__ import annotations

import json
import sys

from tlkv_conformance.references import prefill_client

GREETING = {
    "type": "started",
    "protocol": 1,
    "name": "tlkv reference prefill client",
    "write_versions": sorted(prefill_client.WRITE_VERSIONS),
    "geometry": None,  # any geometry; else {"block_tokens": 16, "n_layers": 2, ...}
    "kv_from_suite": True,  # it pushes the KV in the job's kv_path
}


def answer(message: dict) -> dict | None:
    """The answer to one message of the suite (None for `stop`)."""
    if message["type"] == "start":
        return GREETING
    if message["type"] == "run":
        try:
            return {"seq": message["seq"], "result": prefill_client.push(message["job"])}
        except Exception as exc:  # the client failed: say so, and stay for the next job
            return {"seq": message["seq"], "error": f"{type(exc).__name__}: {exc}"}
    return None


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if message["type"] == "stop":
            return
        print(json.dumps(answer(message)), flush=True)


if __name__ == "__main__":
    main()
