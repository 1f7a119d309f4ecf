// The report renderer: draws a ReportModel (server/analysis/views/model.py) into an element. The
// HTML report (`msprof-lsp --check --format html`) and the VS Code "Show profile" webview both
// run this bundle (README.md here says how to host it).

import { el, formatShare, formatUs } from "./dom";
import type { BreakdownBar, CommMatrix, FindingView, JobModel, RankBar, ReportHost, ReportModel, StartHere } from "./model";
import { renderTimeline, type StepView } from "./timeline";

export type { ReportHost, ReportModel } from "./model";

export const MODEL_ELEMENT_ID = "msprof-report-model";
export const ROOT_ELEMENT_ID = "msprof-report";

const SEGMENTS: [keyof BreakdownBar, string][] = [
  ["computing_us", "computing"],
  ["communication_not_overlapped_us", "communication"],
  ["free_us", "free"],
];

function breakdown(job: JobModel): HTMLElement {
  const section = el("section", { class: "msprof-breakdown" },
    el("h3", {}, "Step breakdown"),
    el("p", { class: "msprof-note" },
      `Per step${job.ranks.length ? " and rank" : ""}: computing, communication not overlapped by computing, free (${job.profile.breakdown_source}).`));
  const max = Math.max(1e-9, ...job.breakdown.map((b) => b.step_us ?? 0));
  const legend = el("div", { class: "msprof-legend" },
    ...SEGMENTS.map(([, name]) => el("span", { class: `msprof-key msprof-seg-${name}` }, name)));
  const bars = el("div", { class: "msprof-bars" });
  for (const b of job.breakdown) {
    const bar = el("div", { class: "msprof-bar", "data-rank": b.rank, "data-step": b.step });
    const track = el("div", { class: "msprof-track" });
    for (const [key, name] of SEGMENTS) {
      const v = b[key] as number | null;
      const seg = el("div", { class: `msprof-seg msprof-seg-${name}`, title: `${name}: ${formatUs(v)}` });
      seg.style.width = `${(100 * (v ?? 0)) / max}%`;
      track.append(seg);
    }
    const who = `${b.rank >= 0 && job.ranks.length ? `rank ${b.rank} · ` : ""}${b.step >= 0 ? `step ${b.step}` : "capture"}`;
    bar.append(el("span", { class: "msprof-bar-label" }, who), track, el("span", { class: "msprof-bar-value" }, formatUs(b.step_us)));
    bars.append(bar);
  }
  if (!job.breakdown.length) bars.append(el("p", { class: "msprof-note" }, "No step breakdown: the profile has no device tasks."));
  section.append(legend, bars);
  return section;
}

function rankBars(ranks: RankBar[]): HTMLElement {
  const section = el("section", { class: "msprof-ranks" }, el("h3", {}, "Ranks"),
    el("p", { class: "msprof-note" }, "Step time per rank, with its communication not overlapped; the slowest rank is marked."));
  const max = Math.max(1e-9, ...ranks.map((r) => r.step_time_us));
  for (const r of ranks) {
    const row = el("div", { class: `msprof-rank-bar${r.slowest ? " msprof-slowest" : ""}`, "data-rank": r.rank, "data-slowest": r.slowest });
    const track = el("div", { class: "msprof-track" });
    const rest = el("div", { class: "msprof-seg msprof-seg-computing" });
    const comm = el("div", { class: "msprof-seg msprof-seg-communication" });
    rest.style.width = `${(100 * Math.max(r.step_time_us - r.comm_not_overlapped_us, 0)) / max}%`;
    comm.style.width = `${(100 * r.comm_not_overlapped_us) / max}%`;
    track.append(rest, comm);
    row.append(el("span", { class: "msprof-bar-label" }, `rank ${r.rank}${r.slowest ? " (slowest)" : ""}${r.analysed ? " · analysed" : ""}`), track,
      el("span", { class: "msprof-bar-value" }, `${formatUs(r.step_time_us)} · comm ${formatUs(r.comm_not_overlapped_us)}`));
    section.append(row);
  }
  return section;
}

function heatmap(comm: CommMatrix): HTMLElement {
  const section = el("section", { class: "msprof-heatmap" }, el("h3", {}, "Communication matrix"));
  const modes: [string, number[][] | (number | null)[][], (v: number) => string][] = [
    ["transit time per step", comm.transit_ms, (v) => `${v.toFixed(3)} ms`],
    ["bandwidth", comm.bandwidth_gbps, (v) => `${v.toFixed(2)} GB/s`],
  ];
  const table = el("table", { class: "msprof-matrix" });
  const draw = (mode: number) => {
    const [what, values, fmt] = modes[mode];
    const flat = values.flat().filter((v): v is number => v !== null);
    const hi = Math.max(1e-12, ...flat);
    const head = el("tr", {}, el("th", {}, "src \\ dst"), ...comm.ranks.map((r) => el("th", {}, String(r))));
    const rows = comm.ranks.map((src, i) =>
      el("tr", {}, el("th", {}, String(src)), ...comm.ranks.map((dst, j) => {
        const v = values[i][j];
        const cell = el("td", { class: "msprof-cell", "data-src": src, "data-dst": dst, title: `${src} → ${dst}: ${v === null ? "no link" : fmt(v)} (${what})` },
          v === null ? "–" : fmt(v));
        if (v !== null) cell.style.setProperty("--msprof-heat", String(v / hi));
        return cell;
      })));
    table.replaceChildren(head, ...rows);
  };
  const select = el("select", { class: "msprof-matrix-mode", "aria-label": "matrix figure" },
    ...modes.map(([what], i) => el("option", { value: i }, what)));
  select.addEventListener("change", () => draw(Number(select.value)));
  draw(0);
  section.append(el("p", { class: "msprof-note" }, "Rank × rank, from the ranks' communication matrices (sums of each op type's total per link)."), select, table);
  return section;
}

/** "wall-step" -> "the wall step": every share is printed with its denominator. */
export function denominator(shareOf: string): string {
  return `the ${shareOf.replace("-", " ")}`;
}

/** The report's opening block: the top findings by saving (the server chose them, as for --check's
 * text and JSON), each with how much per step, what to change and where (a link to its line). */
function startHere(items: StartHere[], host: ReportHost): HTMLElement | null {
  if (!items.length) return null;
  const list = el("ol", { class: "msprof-start-list" });
  for (const s of items) {
    const where = s.path !== null && s.line !== null ? `${s.path}:${s.line}` : "(profile)";
    const link = el("a", { href: "#", class: "msprof-start-where" }, where);
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      if (s.path !== null && s.line !== null) host.openSource(s.path, s.line);
    });
    list.append(el("li", { class: "msprof-start-item", "data-code": s.code, "data-rank": s.rank },
      el("strong", {}, `${s.code} ${s.name}`), " · ", link,
      el("div", { class: "msprof-start-saving" }, s.saving), el("div", { class: "msprof-start-change" }, `change: ${s.change}`)));
  }
  return el("section", { class: "msprof-start-here" }, el("h2", {}, "Start here"),
    el("p", { class: "msprof-note" }, "The findings with the biggest saving per step (unknown savings by their share)."), list);
}

function findingItem(f: FindingView): HTMLElement {
  const item = el("li", { class: `msprof-finding msprof-sev-${f.severity}`, "data-code": f.code },
    el("strong", {}, `${f.code} ${f.name}`), ` ${f.severity} · ${f.saving} · ${formatShare(f.share)} of ${denominator(f.share_of)}`,
    el("p", {}, f.message));
  for (const fix of f.fixes) {
    const body = fix.diff
      ? el("pre", { class: "msprof-diff" }, ...fix.diff.split("\n").map((line) =>
        el("span", { class: `msprof-line${line.startsWith("+") && !line.startsWith("+++") ? " msprof-add" : line.startsWith("-") && !line.startsWith("---") ? " msprof-del" : ""}` }, line)))
      : el("p", { class: "msprof-note" }, "The file could not be read: no diff.");
    item.append(el("details", { class: "msprof-fix" }, el("summary", {}, `fix${fix.safe ? "" : " (review)"}: ${fix.title}`), body));
  }
  return item;
}

function hotspots(job: JobModel): HTMLElement {
  const section = el("section", { class: "msprof-hotspots" }, el("h3", {}, "Hotspots"),
    el("p", { class: "msprof-note" }, "Device time per step by source line, with the findings on each line and their fixes as diffs."));
  const table = el("table", { class: "msprof-hotspot-table" },
    el("tr", {}, el("th", {}, "share"), el("th", {}, "time/step"), el("th", {}, "location / source")));
  for (const h of job.hotspots) {
    const snippet = el("pre", { class: "msprof-snippet" }, ...h.snippet.map((s) =>
      el("span", { class: `msprof-line${s.line >= h.line && s.line <= h.end_line ? " msprof-hot-line" : ""}` }, `${String(s.line).padStart(5)}  ${s.text}`)));
    const findings = el("ul", { class: "msprof-findings" }, ...h.findings.map((i) => findingItem(job.findings[i])));
    table.append(el("tr", { class: "msprof-hotspot", "data-path": h.path, "data-line": h.line, id: anchorOf(h.path, h.line) },
      el("td", {}, formatShare(h.share)), el("td", {}, formatUs(h.device_time_us)),
      el("td", {}, el("div", { class: "msprof-loc" }, `${h.path}:${h.line}`), el("div", { class: "msprof-ops" }, h.ops.join(", ")),
        snippet, h.findings.length ? findings : null)));
  }
  if (!job.hotspots.length) table.append(el("tr", {}, el("td", { colspan: 3 }, "No device time reached a source line.")));
  section.append(table);
  const elsewhere = job.findings.filter((_, i) => !job.hotspots.some((h) => h.findings.includes(i)));
  if (elsewhere.length) {
    section.append(el("h4", {}, "Other findings"), el("ul", { class: "msprof-findings" }, ...elsewhere.map(findingItem)));
  }
  return section;
}

export function anchorOf(path: string, line: number): string {
  return `msprof-src-${path.replace(/[^A-Za-z0-9_-]/g, "_")}-${line}`;
}

function header(job: JobModel): HTMLElement {
  const p = job.profile;
  const rank = p.rank !== null ? ` · rank ${p.rank}${p.ranks.length > 1 ? ` of ${p.ranks.length}` : ""}` : "";
  return el("header", {}, el("h2", {}, `${p.kind} profile`), el("div", { class: "msprof-path" }, p.path),
    el("p", {}, `${p.steps} steps · step ${formatUs(p.step_time_us)} on device · ${formatShare(p.mapped_share)} of device time mapped to code${rank}`));
}

/** Draws the model into ``root`` (replacing its content); returns the timeline view per job. */
export function renderReport(root: HTMLElement, model: ReportModel, host: ReportHost): (StepView | null)[] {
  root.classList.add("msprof-report");
  root.replaceChildren();
  const start = startHere(model.start_here ?? [], host);
  if (start) root.append(start);  // before anything else
  const views: (() => StepView | null)[] = [];
  model.jobs.forEach((job, i) => {
    const article = el("article", { class: "msprof-job", "data-job": i });
    root.append(article);  // attached first: the canvas needs its laid-out width
    const timeline = renderTimeline(root, job.timeline, host);
    article.append(header(job), breakdown(job));
    if (job.ranks.length) article.append(rankBars(job.ranks));
    if (job.comm) article.append(heatmap(job.comm));
    article.append(timeline.section, hotspots(job));
    if (job.notes.length) article.append(el("section", { class: "msprof-notes" }, el("h3", {}, "Notes"), el("ul", {}, ...job.notes.map((n) => el("li", {}, n)))));
    views.push(timeline.view);
  });
  if (!model.jobs.length) root.append(el("p", {}, "No profile was analysed."));
  const drawn = views.map((v) => v());
  drawn.forEach((v) => v?.draw());
  return drawn;
}

/** The HTML report's host: a source link scrolls to its hotspot row and marks it. */
export function pageHost(doc: Document): ReportHost {
  return {
    openSource(path: string, line: number) {
      doc.querySelectorAll(".msprof-target").forEach((n) => n.classList.remove("msprof-target"));
      const row = doc.getElementById(anchorOf(path, line));
      if (row) {
        row.classList.add("msprof-target");
        row.scrollIntoView({ block: "center" });
      }
    },
  };
}

/** `#selftest=click`: click the first job's hot kernel where it is drawn, through the same hit
 * test a user's click takes; the resolved `file:line` lands in the root's data-opened. */
export function selfTest(root: HTMLElement, views: (StepView | null)[]): void {
  const view = views[0];
  if (view) {
    // page coordinates of the canvas, before the click scrolls: the test crops its screenshot there
    const r = view.canvas.getBoundingClientRect();
    root.dataset.canvasRect = [r.left + scrollX, r.top + scrollY, r.width, r.height].map(Math.round).join(",");
    root.dataset.canvasStep = String(view.step.step);
  }
  const hot = view?.hotKernel();
  if (!view || !hot) {
    root.dataset.selftest = "no linked task";
    return;
  }
  const { x, y } = view.centreOf(hot);
  view.canvas.dispatchEvent(new MouseEvent("click", { clientX: x, clientY: y, bubbles: true }));
  root.dataset.selftest = root.dataset.opened ? "clicked" : "click resolved nothing";
}

function start(): void {
  const data = document.getElementById(MODEL_ELEMENT_ID);
  const root = document.getElementById(ROOT_ELEMENT_ID);
  if (!data || !root) return;
  const t0 = performance.now();
  const model = JSON.parse(data.textContent ?? "{}") as ReportModel;
  const views = renderReport(root, model, pageHost(document));
  root.dataset.rendered = "true";
  root.dataset.renderMs = (performance.now() - t0).toFixed(1);  // parse + DOM + first canvas draw
  if (location.hash === "#selftest=click") selfTest(root, views);
}

if (typeof document !== "undefined") {
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
}
