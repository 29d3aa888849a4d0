"""report.html: the conformance report as one self-contained page (docs/report.md, "The HTML
page"), rendered from the model's JSON (`report_json.report_json`), the same data report.json
holds: no aggregation of its own, no network access, no external assets (CSS, script and the
error pictures are inline).

What a person opening a failing run wants first comes first: the gate, "start here", the
requirement x implementation matrix, the producer x consumer matrix, then every failure with
its one-line difference, probable cause, case YAML, hex windows (differing bytes marked) and,
for values read back from a pool, a picture of where the errors are. Passing tests are folded
and every test can be filtered by outcome and by requirement.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from .report import MATRIX_AXES, shown_verdict
from .report_html_evidence import error_picture, hex_windows
from .requirements import clause_url, requirements
from .result_log import headline


def render_html(report: dict[str, Any]) -> str:
    """The page for one report (the dict report.json holds). A page that cannot be rendered
    says so and points at the Markdown and JSON reports, which are written all the same."""
    try:
        return _page(report)
    except Exception as exc:  # the page must never cost the run its report
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            "<title>TLKV conformance</title></head><body><h1>TLKV conformance</h1>"
            f"<p>This page could not be rendered ({escape(repr(exc))}): the report is in the "
            "Markdown and JSON files beside it.</p></body></html>\n"
        )


def _page(report: dict[str, Any]) -> str:
    failures = [t for t in report["tests"] if t["outcome"] in ("failed", "error")]
    failures.sort(key=lambda t: not t["gating"])
    body = [
        _verdict(report),
        _implementations(report),
        _start_here(report),
        _filters(report),
        _requirement_matrix(report),
        _pair_matrix(report),
        _failures(failures),
        _other_tests(report["tests"]),
        _legend(),
    ]
    title = f"TLKV conformance: {report['gate'].upper()} (run {report.get('run_id', '')})"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style></head>\n"
        f'<body data-gate="{escape(report["gate"])}">\n'
        + "\n".join(part for part in body if part)
        + f"\n<script>{SCRIPT}</script>\n</body></html>\n"
    )


# -- the top of the page ------------------------------------------------------------------------


def _verdict(report: dict[str, Any]) -> str:
    gate = report["gate"]
    summary = report["summary"]
    failures, warnings = summary["failures"], summary["warnings"]
    tests = ", ".join(f"{n} {outcome}" for outcome, n in summary["tests"].items()) or "no tests"
    lines = [
        f"{failures} failure{'s' * (failures != 1)} failing the run, {warnings} SHOULD-level "
        f"warning{'s' * (warnings != 1)}" + (" (--strict)" if report["strict"] else ""),
        f"tests: {tests}",
        f"run {report.get('run_id', '')}, suite {report.get('suite_version', '')}, "
        f"started {report.get('started', '')}, finished {report.get('finished', '')}",
    ]
    if not report.get("complete", True):
        lines.insert(
            0,
            f"The run is INCOMPLETE ({report.get('incomplete_reason')}): this report is partial "
            "and no implementation passed.",
        )
    if summary.get("collection_errors"):
        lines.append(f"{summary['collection_errors']} collection errors")
    return (
        '<header id="verdict">'
        f'<h1>TLKV conformance <span class="gate gate-{escape(gate)}">'
        f"{escape(gate.upper())}</span></h1>"
        f'<p class="exit">exit status {report["exit_status"]}</p>'
        + "".join(f"<p>{escape(line)}</p>" for line in lines)
        + "</header>"
    )


def _implementations(report: dict[str, Any]) -> str:
    rows = [
        [
            _code(impl["label"]),
            _code(impl.get("fingerprint") or impl["identity"]),
            escape(impl["description"]),
            f'<span class="gate gate-{escape(impl["gate"])}">{escape(impl["gate"].upper())}</span>',
            escape(_counts(impl["requirements"])),
            escape(_counts(impl["tests"])),
        ]
        for impl in report["implementations"]
    ]
    header = ["implementation", "identity", "pool", "gate", "requirements", "tests"]
    return "<section><h2>Implementations</h2>" + _table(header, rows) + "</section>"


def _start_here(report: dict[str, Any]) -> str:
    causes = report.get("start_here") or []
    if not causes:
        return ""
    items = []
    for cause in causes:
        shown = cause.get("shown_by") or []
        consequences = cause.get("consequences") or []
        n = len(shown) + len(consequences)
        example = (shown or consequences or [""])[0]
        also = f" ({len(consequences)} of them as a consequence)" if consequences else ""
        evidence = (
            f'<div class="evidence">evidence: {escape(cause["evidence"])}</div>'
            if cause.get("evidence")
            else ""
        )
        items.append(
            f'<li><span class="cause">{escape(cause["title"])}</span> '
            f"[{_req_links(cause.get('requirements', []))}]: {n} failed "
            f"test{'s' * (n != 1)}{escape(also)}, e.g. "
            f'<a href="#{_anchor(example)}">{escape(example)}</a>'
            f' <span class="cause-id">{escape(cause["id"])}</span>{evidence}</li>'
        )
    return (
        '<section id="start-here"><h2>Start here</h2>'
        "<p>Probable causes, the most failed tests first:</p>"
        f"<ol>{''.join(items)}</ol></section>"
    )


def _filters(report: dict[str, Any]) -> str:
    reqs = "".join(
        f'<option value="{escape(r["id"])}">{escape(r["id"])}</option>'
        for r in report["requirements"]
    )
    return (
        '<nav id="filters"><label>show tests <select id="filter-outcome">'
        '<option value="">all</option><option value="failed">failed</option>'
        '<option value="skipped">skipped</option><option value="passed">passed</option>'
        "</select></label> "
        '<label>requirement <select id="filter-req"><option value="">any</option>'
        f"{reqs}</select></label> "
        '<span id="filter-count"></span></nav>'
    )


# -- the matrices -----------------------------------------------------------------------------


def _requirement_matrix(report: dict[str, Any]) -> str:
    labels = [impl["label"] for impl in report["implementations"]]
    table = requirements()
    rows = []
    any_failing = False
    for req in report["requirements"]:
        rid = req["id"]
        known = table.get(rid)
        clause = clause_url(known) if known else ""
        cells = []
        for label in labels:
            cell = req["results"].get(label, {})
            verdict = cell.get("verdict", "not run")
            text = shown_verdict(verdict, bool(cell.get("gating")))
            tests = _counts(cell.get("tests", {}))
            cells.append(
                f'<td class="v v-{escape(text)}" title="{escape(tests or "no test")}">'
                f"{escape(text)}</td>"
            )
        failing = any(c.get("verdict") == "failed" for c in req["results"].values())
        any_failing |= failing
        rows.append(
            f'<tr id="req-{escape(rid)}" data-failing="{int(failing)}">'
            f'<th><a class="req" href="#filters" data-req="{escape(rid)}" '
            f'title="{escape(req["text"])}">{escape(rid)}</a></th>'
            f"<td>{escape(req['level'])}</td>{''.join(cells)}"
            f'<td class="clause"><details><summary>{escape(req["section"])} '
            f"({escape(req['source'])})</summary><p>{escape(req['text'])}</p>"
            f"<p>clause: <code>{escape(clause)}</code></p></details></td></tr>"
        )
    head = "".join(f"<th>{_code(label)}</th>" for label in labels)
    return (
        '<section id="requirements"><h2>Requirements x implementations</h2>'
        "<p>Each requirement's verdict per implementation; a requirement's id filters the "
        "tests below by it. Its clause is quoted, with its anchor in the suite's "
        "<code>docs/format.md</code> (or the page named), which the package ships in its "
        "source and repository.</p>"
        f'<label><input type="checkbox" id="only-failing"{" checked" * any_failing}> only '
        "requirements that failed</label>"
        f'<table class="matrix"><thead><tr><th>requirement</th><th>level</th>{head}'
        f"<th>clause</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _pair_matrix(report: dict[str, Any]) -> str:
    matrix = report.get("matrix")
    if not matrix:
        return ""
    producers = matrix.get("producers", matrix["implementations"])
    consumers = matrix.get("consumers", matrix["implementations"])
    cells = {(c["producer"], c["consumer"]): c for c in matrix["cells"]}
    rows = []
    for producer in producers:
        row = [f"<th>{_code(producer)}</th>"]
        for consumer in consumers:
            cell = cells.get((producer, consumer))
            text = "-" if cell is None else shown_verdict(cell["verdict"], bool(cell["gating"]))
            row.append(f'<td class="v v-{escape(text)}">{escape(text)}</td>')
        rows.append(f"<tr>{''.join(row)}</tr>")
    head = "".join(f"<th>{_code(label)}</th>" for label in consumers)
    axes = MATRIX_AXES[0].upper() + MATRIX_AXES[1:]
    return (
        '<section id="pairs"><h2>Producer x consumer</h2>'
        f"<p>{escape(axes)}.</p>"
        f'<table class="matrix"><thead><tr><th></th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


# -- the failures -------------------------------------------------------------------------------


def _failures(failures: Sequence[dict[str, Any]]) -> str:
    if not failures:
        return '<section id="failures"><h2>Failures</h2><p>None.</p></section>'
    return (
        f'<section id="failures"><h2>Failures ({len(failures)})</h2>'
        + "".join(_failure(test) for test in failures)
        + "</section>"
    )


def _failure(test: dict[str, Any]) -> str:
    view = test.get("view") or {}
    mark = "FAIL" if test["gating"] else "warn"
    who = test.get("impl") or " -> ".join(
        test[role] for role in ("producer", "consumer") if test.get(role)
    )
    cause = _probable_cause(test)
    parts = [
        f'<h3><span class="v v-{mark}">{mark}</span> {escape(test["nodeid"])}</h3>',
        f'<p class="facts">{escape(test["outcome"])}; {_code(who or "no implementation")}; '
        f"{escape(test.get('level') or '')}: {_req_links(test['requirements'])}"
        + (f"; blamed: {_req_links(test['blamed'])}" if test.get("blamed") else "")
        + (f"; {_code(view['location'])}" if view.get("location") else "")
        + "</p>",
        f'<p class="difference">{escape(headline(test["message"]))}</p>',
    ]
    if cause:
        parts.append(f'<p class="probable">{cause}</p>')
    for window in view.get("windows", []):
        parts.append(hex_windows(window))
    if view.get("grid"):
        parts.append(error_picture(view["grid"]))
    if view.get("note"):
        parts.append(f'<p class="note">{escape(view["note"])}</p>')
    if view.get("yaml"):
        parts.append(
            f"<details><summary>the case's YAML</summary><pre>{escape(view['yaml'])}</pre>"
            "</details>"
        )
    parts.append(
        "<details><summary>the whole failure message</summary>"
        f"<pre>{escape(test['message'] or '(no message)')}</pre></details>"
    )
    return (
        f'<article class="failure" id="{_anchor(test["id"])}" {_data(test)}>'
        + "".join(parts)
        + "</article>"
    )


def _probable_cause(test: dict[str, Any]) -> str:
    diagnosis = test.get("diagnosis") or []
    if diagnosis:
        cause = diagnosis[0]
        evidence = f" ({escape(cause['evidence'])})" if cause.get("evidence") else ""
        return (
            f"probable cause: <strong>{escape(cause['title'])}</strong> "
            f'<span class="cause-id">{escape(cause["id"])}</span>{evidence}'
        )
    if test.get("consequence_of"):
        return f"a consequence of <strong>{escape(test['consequence_of'])}</strong>"
    return ""


# -- every other test -----------------------------------------------------------------------


def _other_tests(tests: Iterable[dict[str, Any]]) -> str:
    groups: dict[str, list[str]] = {}
    for test in tests:
        if test["outcome"] in ("failed", "error"):
            continue
        reason = (
            f'<td class="reason">{escape(headline(test["message"]))}</td>'
            if test["message"]
            else "<td></td>"
        )
        groups.setdefault(test["outcome"], []).append(
            f"<tr {_data(test)}><td>{escape(test['nodeid'])}</td>"
            f"<td>{escape(', '.join(test['requirements']))}</td>{reason}</tr>"
        )
    sections = []
    for outcome, rows in groups.items():
        sections.append(
            f'<details class="tests" data-group="{escape(outcome)}"><summary>{len(rows)} '
            f"{escape(outcome)} tests</summary><table><tbody>{''.join(rows)}</tbody></table>"
            "</details>"
        )
    return '<section id="tests"><h2>Other tests</h2>' + "".join(sections) + "</section>"


def _legend() -> str:
    return (
        "<footer><p>Verdicts: pass, FAIL (fails the run), warn (a SHOULD-level failure, a "
        "warning unless --strict), affected (tests citing it failed, blamed on other "
        "requirements or on an operation's fault), xfail (a known failure), skip (not "
        "observable through this way in), "
        '- (not run).</p><p id="load-time"></p></footer>'
    )


# -- small pieces -------------------------------------------------------------------------------


def _data(test: dict[str, Any]) -> str:
    outcome = {"error": "failed", "xfailed": "skipped", "xpassed": "passed"}.get(
        test["outcome"], test["outcome"]
    )
    reqs = " ".join(test["requirements"])
    return f'data-outcome="{escape(outcome)}" data-reqs="{escape(reqs)}"'


def _anchor(test_id: str) -> str:
    return "t-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in test_id)


def _req_links(ids: Iterable[str]) -> str:
    return ", ".join(
        f'<a class="req" href="#req-{escape(r)}" data-req="{escape(r)}">{escape(r)}</a>'
        for r in ids
    )


def _code(text: str) -> str:
    return f"<code>{escape(text)}</code>"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in counts.items() if n)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px;color:#1d232a}
h1{font-size:24px}h2{font-size:18px;border-bottom:1px solid #ccd;margin-top:28px}
h3{font-size:14px;margin:0 0 4px;word-break:break-all}
code,pre{font:12px/1.35 ui-monospace,monospace}pre{background:#f6f8fa;padding:8px;overflow:auto}
table{border-collapse:collapse;max-width:100%}td,th{border:1px solid #d8dde3;padding:2px 6px;
text-align:left;vertical-align:top}td code{overflow-wrap:anywhere}a.req{white-space:nowrap}
.gate{padding:2px 10px;border-radius:4px;color:#fff;white-space:nowrap}
.gate-pass{background:#1a7f37}.gate-fail{background:#cf222e}.gate-incomplete{background:#9a6700}
#verdict p{margin:2px 0}.exit{font-weight:600}
.v{font-weight:600;text-align:center}.v-FAIL{background:#ffd7d5;color:#a40e26}
.v-warn{background:#fff1c2;color:#7d4e00}.v-pass{background:#dafbe1;color:#116329}
.v-affected{background:#f0e6ff}.v-skip,.v--{color:#6e7781}
.failure{border:1px solid #d8dde3;border-left:4px solid #cf222e;margin:12px 0;padding:8px 12px}
.difference{font-family:ui-monospace,monospace;font-size:12px;background:#fff8f8;padding:4px}
.probable{margin:4px 0}.cause{font-weight:600}.cause-id{color:#6e7781;font-size:12px}
.evidence{color:#57606a;font-size:12px}
mark.diff{background:#ff8182;color:#000;font-weight:700;padding:0 1px}
#first-diff{outline:2px solid #a40e26}
nav#filters{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #ccd;
z-index:1}
.picture svg .t{font:11px system-ui,sans-serif;fill:#333}.picture svg .b{font-weight:600}
.picture svg .fill{stroke:#222;stroke-width:2}
figcaption{font-size:12px;color:#57606a}
td.clause details p{margin:2px 0;max-width:520px}
.hidden{display:none}.tests table{font-size:12px}.reason{color:#57606a}
"""

# Filters: by outcome (the failures, and the folded groups of other tests) and by requirement
# (a requirement's id anywhere on the page chooses it). The load time is for the benchmark.
SCRIPT = """
(function(){
  const outcome=document.getElementById('filter-outcome');
  const req=document.getElementById('filter-req');
  const onlyFailing=document.getElementById('only-failing');
  function apply(){
    const o=outcome.value, r=req.value; let shown=0;
    for(const el of document.querySelectorAll('[data-outcome]')){
      const ok=(!o||el.dataset.outcome===o)&&(!r||el.dataset.reqs.split(' ').includes(r));
      el.classList.toggle('hidden',!ok); if(ok) shown++;
    }
    for(const g of document.querySelectorAll('details.tests')){
      const group=g.dataset.group, same={xfailed:'skipped', xpassed:'passed'}[group]||group;
      g.classList.toggle('hidden', !!o && same!==o);
      if((r||o) && !g.classList.contains('hidden')) g.open=true;
    }
    for(const row of document.querySelectorAll('#requirements tbody tr'))
      row.classList.toggle('hidden', onlyFailing.checked && row.dataset.failing!=='1' &&
        row.id!=='req-'+r);
    document.getElementById('filter-count').textContent=shown+' tests shown';
  }
  outcome.addEventListener('change',apply); req.addEventListener('change',apply);
  onlyFailing.addEventListener('change',apply);
  document.addEventListener('click',function(e){
    const a=e.target.closest('a.req'); if(!a) return;
    req.value=a.dataset.req; apply();
  });
  apply();
  document.addEventListener('DOMContentLoaded',function(){
    const ms=performance.now();
    document.body.dataset.loadMs=ms.toFixed(1);
    document.getElementById('load-time').textContent='page ready in '+ms.toFixed(0)+' ms';
  });
})();
"""
