"""YAML conformance cases: the file format (case-schema.yaml, docs/cases.md), loading, kinds."""

from ._loader import (
    CaseFile,
    CaseFileError,
    build_generated_case,
    cached_case_file,
    load_case_file,
)
from ._sources import (
    BlockPlan,
    CaseDataError,
    EnvelopeResolver,
    mutate,
    plan_blocks,
    tokens_of,
)
from .kinds import KINDS, Case, CaseOrigin, RejectCase, check_imported, needs

__all__ = [
    "KINDS",
    "BlockPlan",
    "Case",
    "CaseDataError",
    "CaseFile",
    "CaseFileError",
    "CaseOrigin",
    "EnvelopeResolver",
    "RejectCase",
    "build_generated_case",
    "cached_case_file",
    "check_imported",
    "load_case_file",
    "mutate",
    "needs",
    "plan_blocks",
    "tokens_of",
]
