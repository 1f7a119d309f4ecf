"""The HTML report's drawing, measured in headless chromium (docs/report.md).

    python benchmarks/bench_report.py rects [--n 100000]    # canvas 2D vs SVG, N rectangles
    python benchmarks/bench_report.py large --project DIR   # --format html of a generated project

``rects``: one page per technique draws the same N seeded rectangles (a timeline's worth: 8 lanes,
four colours) -- hand-written canvas ``fillRect`` calls, and SVG ``<rect>`` elements built with
createElementNS -- and reports the in-page time (draw, then a forced layout; for SVG the layout
is where the cost is). The end-to-end time of a ``--screenshot`` of each page (load, layout,
paint, encode) is the median of 3 runs, less that of an empty page in the same run. Printed: each
figure and the ratio SVG / canvas.

``large``: ``--check --format html`` of a project written by ``bench_large.py --keep DIR`` (the
500 MiB trace by default): the run's wall time; in one process, after one analysis (cached load),
the HTML page's rendering (model + page) against the text report's rendering of the same run (the
baseline), best of 3; the page size; and the renderer's own time in chromium (``data-render-ms``:
JSON parse, DOM, first canvas draw) with the page's load wall time against an empty page.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,900",
         "--force-device-scale-factor=1"]

_DRAW = {
    "canvas": """
const c = document.createElement('canvas'); c.width = 1400; c.height = 900; document.body.append(c);
const ctx = c.getContext('2d');
for (let i = 0; i < N; i++) { ctx.fillStyle = COLOURS[i & 3]; ctx.fillRect(X[i], Y[i], W[i], 20); }
ctx.getImageData(0, 0, 1, 1);  // flush the drawing
""",
    "svg": """
const ns = 'http://www.w3.org/2000/svg';
const s = document.createElementNS(ns, 'svg'); s.setAttribute('width', 1400); s.setAttribute('height', 900);
for (let i = 0; i < N; i++) {
  const r = document.createElementNS(ns, 'rect');
  r.setAttribute('x', X[i]); r.setAttribute('y', Y[i]); r.setAttribute('width', W[i]); r.setAttribute('height', 20);
  r.setAttribute('fill', COLOURS[i & 3]); s.append(r);
}
document.body.append(s);
s.getBoundingClientRect(); s.lastChild.getBBox();  // force style and layout
""",
    "empty": "",
}


def _page(kind: str, n: int) -> str:
    setup = f"""
const N = {n}; const COLOURS = ['#3f7fd8', '#2ea36b', '#d9822b', '#b0b0b0'];
let seed = 1; const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const X = new Float64Array(N), Y = new Float64Array(N), W = new Float64Array(N);
for (let i = 0; i < N; i++) {{ X[i] = rnd() * 1390; Y[i] = (i % 8) * 26; W[i] = 0.5 + rnd() * 4; }}
const t0 = performance.now();
{_DRAW[kind]}
document.title = 'ms=' + (performance.now() - t0).toFixed(1);
"""
    return f"<!DOCTYPE html><html><head><title>-</title></head><body><script>{setup}</script></body></html>"


def _chromium(*args: str) -> tuple[float, str]:
    t = time.perf_counter()
    run = subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=300, check=False)
    if run.returncode != 0:
        raise SystemExit(f"chromium failed: {run.stderr[-500:]}")
    return time.perf_counter() - t, run.stdout


def rects(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pages = {}
        for kind in ("canvas", "svg", "empty"):
            pages[kind] = Path(tmp) / f"{kind}.html"
            pages[kind].write_text(_page(kind, n), encoding="utf-8")
        in_page, wall = {}, {}
        for kind, page in pages.items():
            _, dom = _chromium("--dump-dom", page.as_uri())
            in_page[kind] = float(re.search(r"<title>ms=([\d.]+)</title>", dom).group(1))
            wall[kind] = statistics.median(_chromium(f"--screenshot={tmp}/{kind}.png", page.as_uri())[0] for _ in range(3))
    print(f"{n:,} rectangles, headless chromium")
    for kind in ("canvas", "svg"):
        print(f"  {kind:6} in page {in_page[kind]:8.1f} ms   screenshot {1000 * (wall[kind] - wall['empty']):8.1f} ms over an empty page")
    print(f"  svg / canvas: in page {in_page['svg'] / max(in_page['canvas'], 0.1):.1f}x, "
          f"screenshot {(wall['svg'] - wall['empty']) / max(wall['canvas'] - wall['empty'], 1e-3):.1f}x")


def _render_times(project: Path) -> tuple[float, float]:
    """Best-of-3 seconds of text.render and html.render of one analysed run."""
    import io
    import os

    from msprof_lsp.server.check.command import collect
    from msprof_lsp.server.check.report import html, text
    from msprof_lsp.server.cli import parse

    _, args = parse(["--check", "--quiet", "--format", "html", str(project)])
    here = Path.cwd()
    os.chdir(project)
    try:
        run = collect(args, lambda message, fraction: None, io.StringIO())
        times = []
        for render in (lambda: text.render(run, color=False), lambda: html.render(run)):
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                render()
                best = min(best, time.perf_counter() - t)
            times.append(best)
    finally:
        os.chdir(here)
    return times[0], times[1]


def large(project: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        t = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "msprof_lsp.server", "--check", "--quiet", "--no-cache",
                              "--format", "html", "--output", str(page), str(project)], cwd=project,
                             capture_output=True, text=True, timeout=1800, check=False)
        wall = time.perf_counter() - t
        if run.returncode not in (0, 1):
            raise SystemExit(f"--check --format html exited {run.returncode}: {run.stderr[-500:]}")
        size = page.stat().st_size
        load, dom = _chromium("--dump-dom", page.as_uri())
        render_ms = float(re.search(r'data-render-ms="([\d.]+)"', dom).group(1))
        empty = Path(tmp) / "empty.html"
        empty.write_text(_page("empty", 0), encoding="utf-8")
        base, _ = _chromium("--dump-dom", empty.as_uri())
    text_s, html_s = _render_times(project)
    trace = next(project.glob("prof/*_ascend_pt")) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    print(f"{trace.stat().st_size / (1 << 20):,.0f} MiB trace_view.json")
    print(f"  --check --format html --no-cache: {wall:.1f} s")
    print(f"  rendering one analysed run: text {text_s:.2f} s, html {html_s:.2f} s: html / text {html_s / text_s:.1f}x")
    print(f"  report.html {size / (1 << 20):.2f} MiB ({size / trace.stat().st_size:.4f} of the trace)")
    print(f"  renderer in chromium {render_ms:.0f} ms; page load {load:.2f} s vs an empty page {base:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rects")
    r.add_argument("--n", type=int, default=100_000)
    g = sub.add_parser("large")
    g.add_argument("--project", type=Path, required=True, help="a folder written by bench_large.py --keep")
    args = ap.parse_args()
    if CHROMIUM is None:
        raise SystemExit("chromium is not installed")
    if args.what == "rects":
        rects(min(args.n, 1_000_000))
    else:
        large(args.project.resolve())


if __name__ == "__main__":
    main()
