"""Where the bundled corpus lives: beside the package in a checkout, inside it once installed.

In the checkout the design's folders sit at the top (cases/, conformance/, parity/ next to
harness/); an installed distribution carries them under tlkv_conformance/corpus/ (pyproject.toml
maps them there). Everything that reads the corpus asks this module, so both layouts work.
"""

from __future__ import annotations

import functools
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CASES = "cases"
CONFORMANCE = "conformance"
PARITY = "parity"


@functools.cache
def corpus_root() -> Path:
    """The folder holding cases/, conformance/ and parity/."""
    bundled = PACKAGE_DIR / "corpus"
    return bundled if (bundled / CASES).is_dir() else PACKAGE_DIR.parent


def cases_dir() -> Path:
    return corpus_root() / CASES


def conformance_dir() -> Path:
    return corpus_root() / CONFORMANCE


def parity_dir() -> Path:
    return corpus_root() / PARITY


def abi_header() -> Path:
    """abi/tl_kv.h, the C ABI engines compile against."""
    installed = PACKAGE_DIR / "abi" / "tl_kv.h"
    return installed if installed.is_file() else PACKAGE_DIR.parent / "abi" / "tl_kv.h"


def is_checkout() -> bool:
    """Whether the package runs from a source checkout (an editable install), not a wheel."""
    return corpus_root() == PACKAGE_DIR.parent
