"""How fast a large run's report.html is ready in a browser.

    .venv/bin/python benchmarks/bench_report_html.py [--tests N] [--repeats R]

Runs the catalogue mutant selftest/test_report_html.py uses (every case of its files, with a
conformance report), repeats its tests up to N (default 2,000) as a large run's page would hold
them, and opens that page R times (default 5) in headless Chromium, each in a fresh profile. It
prints the page's size and the median and range of the time to DOMContentLoaded, as the page
writes it into `<body data-load-ms>`. docs/report.md quotes the figures.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tlkv_conformance.report_html import render_html  # noqa: E402

from selftest.mutation import load_catalogue, run_mutant  # noqa: E402 - after the path is set
from selftest.test_report_html import (  # noqa: E402
    BROWSERS,
    MUTANT,
    PATHS,
    run_browser,
    scaled_report,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    browser = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if browser is None:
        print("no Chromium found: install Debian's chromium package", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        mutant = {m.id: m for m in load_catalogue()}[MUTANT]
        run_mutant(
            mutant,
            workdir,
            extra=[f"--conformance-report={workdir / 'report'}"],
            first_failure=False,
            paths=PATHS,
        )
        page = workdir / "big.html"
        page.write_text(render_html(scaled_report(workdir, args.tests)), encoding="utf-8")
        size = page.stat().st_size
        times = []
        for _ in range(args.repeats):
            dom = run_browser(browser, page, "--dump-dom")
            loaded = re.search(r'data-load-ms="([\d.]+)"', dom)
            if loaded is None:
                print("the page's script did not run", file=sys.stderr)
                return 1
            times.append(float(loaded[1]))
    print(
        f"a {args.tests}-test page ({size:,} bytes): "
        f"ready in {statistics.median(times):.0f} ms median "
        f"({min(times):.0f}-{max(times):.0f} ms over {len(times)} opens)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
