"""From a failure to the bug: which requirements a failed test is blamed on, and which known
mistake its differences match (docs/diagnosis.md).

One stage with two entry points. A failing check attaches what it saw (an `Evidence`, from
tlkv_conformance.evidence) to its `CaseFailure`; `attribute`, called once where the test is
judged, turns it into an `Attribution`: the causes whose signature matches (a mistaken
computation done again here gives exactly the bytes or values the implementation gave), and the
blamed requirements, those whose own bytes or fields differ; a difference that follows from
another (a CRC that differs because the payload does) is not blamed. Where the evidence asks for
it, `attribute` probes the implementation again through the adapter's one probe operation
(`probe_reader`). At the end of the run `diagnose_run` settles the failures' attributions
against each other and gathers the run's causes, with the failures each one explains, for the
report's "start here" section.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .. import oracle
from ..adapters import Adapter
from ..evidence import (
    CountEvidence,
    EnvelopeEvidence,
    Evidence,
    FaultEvidence,
    HashEvidence,
    KnownMistake,
    OrderEvidence,
    PoolChangeEvidence,
    PoolHistoryEvidence,
    RefusalEvidence,
    SizeEvidence,
    StaleHashEvidence,
    ValuesEvidence,
)
from ._causes import FAULT, REFUSED_INSTEAD, VALID_REFUSED, Attribution, Cause, Finding
from ._chunk_crc import client_chunk_crc_cause
from ._crc_signatures import CRC_FAMILY
from ._envelope import envelope_attribution
from ._faults import fault_title, own_fault_cause, valid_input_fault_cause
from ._hash_signatures import hash_causes
from ._layout import record_stride_causes, swapped_field_causes
from ._orders import permutation_causes
from ._pool_models import (
    history_causes,
    registry_order_causes,
    registry_pair_causes,
    write_rule_causes,
)
from ._probe import probe_chunk_crc, probe_reader, registry_answers, registry_probe_fits
from ._refusals import (
    envelope_properties,
    fault_cause_id,
    limit_answered,
    refused_valid_causes,
)
from ._signatures import ONE_OF
from ._v2_decoder import imported_decode_causes
from ._value_refusals import value_refusal_causes
from ._values import values_attribution
from ._widths import hash_fault_causes

__all__ = [
    "MAX_FINDINGS",
    "ONE_OF",
    "Attribution",
    "Cause",
    "Finding",
    "RunDiagnosis",
    "attribute",
    "diagnose_run",
]

MAX_FINDINGS = 5  # causes a report shows first ("start here")
# A pool that runs out of blocks too early refuses writes and imports for want of room.
OUT_OF_BLOCKS = frozenset(VALID_REFUSED.format(code=c) for c in ("ENOMEM", "RESOURCE_EXHAUSTED"))


def attribute(
    evidence: Evidence | None, cited: Sequence[str], implementation: Adapter | None = None
) -> Attribution:
    """The attribution of one failure, from its evidence and the requirements its test cites.
    `implementation`: the way in the test ran against, probed again where the evidence names
    the pool that refused an envelope (`probe_reader`). Never raises: a diagnosis that cannot be
    made leaves the blame on what the test cites."""
    if evidence is None:
        return Attribution(blamed=tuple(cited), note="no evidence recorded")
    try:
        causes, fields, symptom = _analyse(evidence, cited, implementation)
    except Exception as exc:  # a diagnosis must never hide the failure itself
        return Attribution(blamed=tuple(cited), note=f"diagnosis failed: {exc!r}")
    if causes:
        # A cause breaking no requirement (an operation's own fault: it never answers, hangs
        # for large exports) is blamed on none: the requirements the test cites were not
        # shown, not broken (the report counts them affected).
        blamed = causes[0].reqs
    else:
        # Field requirements the test cites, else the fields' own: a reader case whose values
        # differ is about V2-DECODE, whatever else it cites.
        blamed = tuple(r for r in cited if r in fields) or tuple(sorted(fields)) or tuple(cited)
    return Attribution(tuple(causes), blamed, symptom)


def _analyse(
    evidence: Evidence, cited: Sequence[str], implementation: Adapter | None
) -> tuple[list[Cause], set[str], str]:
    if isinstance(evidence, HashEvidence):
        causes = hash_causes(evidence.parent, evidence.tokens, evidence.expected, evidence.actual)
        return causes, {"HASH-INPUT", "HASH-CHAIN", "HASH-FNV", "HASH-ZERO"}, ""
    if isinstance(evidence, EnvelopeEvidence):
        causes, reqs, symptom = envelope_attribution(
            evidence.expected,
            evidence.actual,
            evidence.blocks,
            evidence.block_ids,
            evidence.pool_dtype,
            evidence.held_read_back,
            evidence.released,
            evidence.given,
        )
        if not causes:
            causes = imported_decode_causes(evidence.actual, evidence.sources)
        return causes, reqs, symptom
    if isinstance(evidence, SizeEvidence):
        causes = []
        if evidence.expected - evidence.actual == 4:
            causes.append(
                Cause(
                    "size-without-trailer",
                    "the envelope's size computed without the 4-byte CRC trailer",
                    ("ENV-SIZE",),
                    f"export_bytes({evidence.n_blocks}, v{evidence.version}) = "
                    f"{evidence.actual}, {evidence.expected} due",
                )
            )
        return causes, {"ENV-SIZE"}, ""
    if isinstance(evidence, ValuesEvidence):
        causes, fields = values_attribution(evidence, implementation)
        return causes, fields, ""
    if isinstance(evidence, RefusalEvidence):
        probed = None
        if implementation is not None:  # a server's chunk check first: it refuses any envelope
            probed = probe_chunk_crc(implementation, evidence) or probe_reader(
                implementation, evidence
            )
        # a valid envelope refused by a pool the evidence names: probed for the limits and
        # for an over-enforced rule
        probe = implementation if evidence.pool is not None and not evidence.rules else None
        if (
            probed is None
            and probe is not None
            and (
                found := refused_valid_causes(probe, evidence)
                or value_refusal_causes(probe, evidence)
                or swapped_field_causes(probe, evidence)
                or record_stride_causes(probe, evidence)
            )
        ):
            reqs = {r for c in found for r in c.reqs}
            return found, reqs, VALID_REFUSED.format(code=evidence.actual)
        if (
            evidence.write is not None
            and evidence.actual
            and not evidence.rules
            and (found := write_rule_causes(implementation, *evidence.write, evidence.actual))
        ):
            return found, {"POOL-WRITE-ARGS"}, VALID_REFUSED.format(code=evidence.actual)
        return _refusal(evidence, probed)
    if isinstance(evidence, PoolChangeEvidence):
        cause = Cause(
            "non-atomic",
            "a refused import or transfer leaves changes in the pool (not all or nothing)",
            evidence.reqs,
            "the pool differs after the refusal",
        )
        return [cause], set(evidence.reqs), ""
    if isinstance(evidence, CountEvidence):
        free_count = (
            "free-count",
            "the free-block count moves by another number than the blocks allocated or freed",
        )
        if not evidence.released:  # a write or an import allocated another number
            counted = ("POOL-REFS", "POOL-WRITE-READ", "READ-ACCEPT")
            reqs = tuple(r for r in cited if r in counted) or counted
            detail = f"free blocks {evidence.actual}, {evidence.expected} due"
            return [Cause(*free_count, reqs, detail)], set(reqs), ""
        if evidence.actual > evidence.expected:
            # more free after releases, and no block shown freed while held (the case checks
            # which were, _freed_while_held): the count alone moved
            detail = f"free blocks {evidence.actual} after releases, {evidence.expected} due"
            return [Cause(*free_count, ("POOL-REFS",), detail)], {"POOL-REFS"}, ""
        causes = []
        if evidence.actual < evidence.expected:
            causes.append(
                Cause(
                    "release-not-freed",
                    "releasing a block's last reference does not free it",
                    ("POOL-REFS",),
                    f"free blocks {evidence.actual} after releases, {evidence.expected} due",
                    # a pool that runs out of blocks too early refuses writes and imports
                    frozenset(
                        VALID_REFUSED.format(code=c) for c in ("ENOMEM", "RESOURCE_EXHAUSTED")
                    ),
                )
            )
        return causes, {"POOL-REFS"}, ""
    if isinstance(evidence, FaultEvidence):
        known = evidence.operation_fault
        if known is None and evidence.hash_input is not None:
            found = hash_fault_causes(implementation, *evidence.hash_input, evidence.detail)
            return found, {"HASH-INPUT"} if found else set(), FAULT
        if evidence.sent_chunk_crc is not None:  # a PullKv chunk: how its field was computed
            sent = client_chunk_crc_cause(*evidence.sent_chunk_crc, ("XFER-CHUNK-CRC",), "pull")
            return ([sent] if sent else []), {"XFER-CHUNK-CRC"}, FAULT
        if known is None:
            own = own_fault_cause(evidence.detail)
            return ([own], set(own.reqs), FAULT) if own else ([], set(), FAULT)
        detail = evidence.detail.splitlines()[0]
        return [Cause(known.id, known.title, (), detail, yields_to=known.yields_to)], set(), FAULT
    if isinstance(evidence, KnownMistake):
        if evidence.registry_probe is not None and not registry_probe_fits(
            implementation, evidence.registry_probe, evidence.cause
        ):
            if evidence.imported is not None and (
                found := registry_order_causes(
                    implementation, evidence.registry_probe, *evidence.imported
                )
            ):
                return found, {"POOL-FIND"}, ""
            if evidence.registered is not None and (
                found := registry_pair_causes(
                    implementation, evidence.registry_probe, *evidence.registered
                )
            ):
                return found, {"POOL-FIND"}, ""
            return [], set(evidence.reqs), ""
        cause = Cause(
            evidence.cause,
            evidence.title,
            evidence.reqs,
            evidence.detail,
            yields_to=evidence.yields_to,
        )
        if evidence.chunk_crc is not None:  # how the client computed the field, when known
            cause = client_chunk_crc_cause(*evidence.chunk_crc, evidence.reqs) or cause
        return [cause], set(evidence.reqs), ""
    if isinstance(evidence, OrderEvidence):
        found = ", ".join(str(i) for i in evidence.order)
        causes = permutation_causes(
            evidence.subject,
            evidence.order,
            evidence.reqs,
            dict(evidence.keys),
            f"the items due at {found}, in that order",
        )
        return causes, set(evidence.reqs), ""
    if isinstance(evidence, PoolHistoryEvidence):
        answers = registry_answers(implementation, evidence.geometry) if implementation else None
        causes = history_causes(evidence, answers.writes_registered if answers else None)
        if evidence.fault:  # a write that faulted: blamed on what the case cites, unnamed
            return causes, set(), FAULT
        return causes, {"POOL-REFS", "POOL-FIND"}, ""
    if isinstance(evidence, StaleHashEvidence):
        cause = Cause(
            "release-keeps-hash",
            "releasing a block's last reference leaves its hash registered",
            ("POOL-REFS",),
            f"find({evidence.block_hash:#x}) still succeeds after the release",
        )
        return [cause], {"POOL-REFS"}, ""
    return [], set(), ""


def _refusal(ev: RefusalEvidence, probed: Cause | None) -> tuple[list[Cause], set[str], str]:
    """`probed`: the CRC mistake a probe found, with which the reader reads the refused
    envelope as it should have (`probe_reader`), or a server accepts a chunk
    (`probe_chunk_crc`)."""
    expected = " or ".join(sorted(ev.expected)) or "success"
    # In the order a reader applies them (the spec's), so that the first is the check that
    # should have stopped the input.
    order = list(oracle.READER_RULES)
    rules = tuple(sorted(ev.rules, key=lambda r: (order.index(r) if r in order else len(order), r)))
    if probed is not None:
        return [probed], set(probed.reqs), ""
    if not ev.rules:  # a valid input
        symptom = VALID_REFUSED.format(code=ev.actual) if ev.actual else ""
        if ev.actual == "fault":
            cause = valid_input_fault_cause(ev.fault)
            return [cause], set(cause.reqs), symptom
        if ev.actual == "ESHAPE":
            # ESHAPE is the geometry rule's alone, and the input has the pool's geometry.
            cause = Cause(
                "geometry-compared-wrongly",
                "the envelope's geometry compared with the wrong pool fields",
                ("READ-GEOMETRY",),
                "a valid envelope of the pool's own geometry refused with ESHAPE",
            )
            return [cause], {"READ-GEOMETRY"}, symptom
        if ev.actual == "RESOURCE_EXHAUSTED" and not ev.envelope:
            cause = Cause(
                "xfer-size-limit-too-low",
                "a transfer within the 4 MiB chunk limit refused as too large",
                ("XFER-CHUNK-SIZE",),
                "a valid transfer refused with RESOURCE_EXHAUSTED",
            )
            return [cause], {"XFER-CHUNK-SIZE"}, symptom
        return [], {"READ-ACCEPT"}, symptom
    if ev.actual is None:
        causes = [
            Cause(
                f"rule-not-enforced:{rule}",
                f"{rule} not enforced: input breaking only it accepted",
                (rule,),
                f"{expected} was due",
            )
            for rule in rules
        ]
        return causes, set(rules), ""
    if ev.actual == "fault":
        first = rules[0]
        cause = Cause(
            fault_cause_id(ev.fault, first),
            f"{fault_title(ev.fault)} on input breaking {first}",
            (first,),
            explains=frozenset({FAULT}),
        )
        return [cause], {first}, ""
    limit = limit_answered(ev)
    if (ev.rules_first or limit) and ev.actual in ("EINVAL", "ENOMEM", "RESOURCE_EXHAUSTED"):
        answered = f"{limit} status," if limit else "(a limit),"
        cause = Cause(
            "limits-before-rules",
            "the caller's limits checked before the reader rules",
            ("READ-RULES-FIRST",),
            f"refused with {ev.actual}, {answered} checked before {rules[0]} ({expected} due)",
            yields_to=frozenset(f"rule-not-enforced:{rule}" for rule in rules),
        )
        return [cause], {"READ-RULES-FIRST"}, ""
    # A reader whose CRC is wrong refuses every envelope for it, whatever a case is about (any
    # CRC mistake the run shows); one that misreads the geometry refuses every envelope with
    # ESHAPE.
    yields = frozenset({CRC_FAMILY}) if ev.actual in ("EFORMAT", "DATA_LOSS") else frozenset()
    if ev.actual == "ESHAPE":
        yields = frozenset({"geometry-compared-wrongly"})
    # stopped before its rule by a property a reader over-enforces (the run shows which)
    yields |= envelope_properties(ev.envelope)
    # A reader that refuses valid envelopes with this status too says nothing of the rule by it
    # (withdrawn when the run shows that symptom: `_withdrawn`).
    yields |= {VALID_REFUSED.format(code=ev.actual)}
    causes = [
        Cause(
            f"wrong-status:{rule}",
            f"{rule} refused with another status",
            (rule,),
            f"refused with {ev.actual}, {expected} due",
            yields_to=yields,
        )
        for rule in rules
    ]
    return causes, set(rules), REFUSED_INSTEAD.format(code=ev.actual)


@dataclass(frozen=True)
class RunDiagnosis:
    """A run's diagnosis: each failed test's attribution settled against the run's other
    failures (with its `consequence`, when one of the run's causes explains it), and the run's
    probable causes, the most tests first."""

    attributions: dict[str, Attribution]
    findings: list[Finding]


def diagnose_run(failures: Mapping[str, Attribution]) -> RunDiagnosis:
    """The run's diagnosis from its failed tests' attributions (test -> `attribute`'s answer).
    Where one failure matches several causes, the one the run shows most comes first; a failure
    whose symptom a cause found elsewhere explains (a valid envelope refused with EFORMAT, by a
    reader whose CRC the export tests show wrong) becomes that cause's consequence, blamed on
    its requirements."""
    settled = _settle(dict(failures))
    shown = frozenset(a.symptom for a in settled.values() if a.symptom)
    found = _findings(settled.items(), shown)
    attributions = {}
    for test, attribution in settled.items():
        cause = _consequence_of(attribution, found)
        if cause is not None:
            attribution = replace(attribution, blamed=cause.reqs, consequence=cause.id)
        else:
            attribution = _withdrawn(attribution, shown)
        attributions[test] = attribution
    return RunDiagnosis(attributions, found)


def _settle(attributions: dict[str, Attribution]) -> dict[str, Attribution]:
    """Where one failure matches several causes (a parent 0xffffffff00000000 truncated to 32
    bits is also a parent ignored), the one the run's other failures show most comes first,
    and the blame is its; where the run shows two of them as often (every failure fits both),
    the failure keeps its "one of"."""
    counts = Counter(c.id for a in attributions.values() for c in a.causes)
    settled = {}
    for test, attribution in attributions.items():
        if len(attribution.causes) > 1:
            best = max(attribution.causes, key=lambda c: counts[c.id])
            # Causes the run shows as often as each other are not told apart: the failure stays
            # "one of", unless the one of settles on its first (Cause.first_on_ties).
            tied = sum(counts[c.id] == counts[best.id] for c in attribution.causes) > 1
            if tied and not attribution.causes[0].first_on_ties:
                best = attribution.causes[0]
            if best is not attribution.causes[0]:
                rest = tuple(c for c in attribution.causes if c is not best)
                attribution = replace(attribution, causes=(best, *rest), blamed=best.reqs)
        settled[test] = attribution
    return settled


def _withdrawn(attribution: Attribution, shown: frozenset[str]) -> Attribution:
    """The attribution without the causes that a symptom of the run contradicts (an exact id
    of their `yields_to`): a rule's input refused with EFORMAT where ESHAPE is due is no sign
    of the rule when valid envelopes are refused with EFORMAT too. The failure keeps its blame,
    with a note saying why no cause is named."""
    contradicted = sorted({y for c in attribution.causes for y in c.yields_to & shown})
    if not contradicted:
        return attribution
    return replace(
        attribution,
        causes=tuple(c for c in attribution.causes if not c.yields_to & shown),
        note=f"the run also shows {', '.join(contradicted)}: what this failure shows is no "
        "sign of the mistake it would otherwise name",
    )


def _findings(
    failures: Iterable[tuple[str, Attribution]], shown: frozenset[str] = frozenset()
) -> list[Finding]:
    """A run's probable causes, most tests first: each with the failures whose own evidence
    shows it and those whose symptom it explains (their consequences). A cause yielding to
    another of the run's causes, or to a symptom `shown` by its failures, is none of them."""
    failures = list(failures)
    present = {a.cause.id for _, a in failures if a.cause is not None}

    def yields(cause: Cause) -> bool:
        return bool(cause.yields_to & shown) or any(cause.yields_to_cause(p) for p in present)

    found: dict[str, Finding] = {}
    for test, attribution in failures:
        cause = attribution.cause
        if cause is not None and not yields(cause):
            finding = found.setdefault(cause.id, Finding(cause))
            if not cause.reqs:  # an operation's fault: titled with the run's latest knowledge
                finding.cause = replace(finding.cause, title=cause.title)
            finding.shown_by.append(test)
    for test, attribution in failures:
        if attribution.cause is None or yields(attribution.cause):
            explaining = _explaining(attribution, list(found.values()))
            if explaining is not None:
                explaining.explains.append(test)
    return sorted(found.values(), key=lambda f: (-f.tests, f.cause.id))


def _explaining(attribution: Attribution, run: Sequence[Finding]) -> Finding | None:
    """The run's finding that accounts for a failure: one its own cause yields to, or, with no
    cause, one that explains its symptom (the most shown, when several do)."""
    cause = attribution.cause
    if cause is not None:
        candidates = [f for f in run if cause.yields_to_cause(f.cause.id)]
    elif attribution.symptom:
        candidates = [f for f in run if attribution.symptom in f.cause.explains]
    else:
        candidates = []
    return max(candidates, key=lambda f: len(f.shown_by)) if candidates else None


def _consequence_of(attribution: Attribution, run: Sequence[Finding]) -> Cause | None:
    """The run's cause that accounts for a failure better than its own evidence, if any."""
    finding = _explaining(attribution, run)
    return finding.cause if finding is not None else None
