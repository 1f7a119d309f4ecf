// The timeline of one step: one lane per device stream and the host thread, drawn on a canvas
// (hand-written 2D: docs/report.md has the measurement against SVG), coloured by task class,
// with wheel zoom, drag pan and click-to-source through one hit test.

import { cssVar, el, formatUs } from "./dom";
import type { Lane, ReportHost, Timeline, TimelineStep } from "./model";

const LANE_HEIGHT = 22;
const LANE_GAP = 4;
const LABEL_WIDTH = 150;
const AXIS_HEIGHT = 18;
const MIN_SPAN_US = 0.05;

export const CLASS_COLOURS: Record<string, [string, string]> = {
  compute: ["--msprof-compute", "#3f7fd8"],
  memcpy: ["--msprof-memcpy", "#2ea36b"],
  communication: ["--msprof-communication", "#d9822b"],
  wait: ["--msprof-wait", "#b0b0b0"],
  other: ["--msprof-other", "#7a6fb0"],
  host: ["--msprof-host", "#9a6b3f"],
};

export interface Hit {
  lane: Lane;
  index: number;
}

/** One step's drawing: owns the canvas, the visible window and the hit test. */
export class StepView {
  readonly canvas: HTMLCanvasElement;
  private v0 = 0;
  private v1: number;
  private drag: { x: number; v0: number; v1: number; moved: boolean } | null = null;

  constructor(
    private readonly root: HTMLElement,
    private readonly timeline: Timeline,
    readonly step: TimelineStep,
    private readonly host: ReportHost,
    private readonly tooltip: HTMLElement,
  ) {
    this.v1 = Math.max(step.dur_us, MIN_SPAN_US);
    this.canvas = el("canvas", { class: "msprof-timeline-canvas", "data-step": step.step });
    this.canvas.addEventListener("wheel", (e) => this.onWheel(e), { passive: false });
    this.canvas.addEventListener("mousedown", (e) => {
      this.drag = { x: e.clientX, v0: this.v0, v1: this.v1, moved: false };
    });
    window.addEventListener("mouseup", () => {
      this.drag = null;
    });
    this.canvas.addEventListener("mousemove", (e) => this.onMove(e));
    this.canvas.addEventListener("mouseleave", () => {
      this.tooltip.hidden = true;
    });
    this.canvas.addEventListener("click", (e) => this.onClick(e));
  }

  get height(): number {
    return AXIS_HEIGHT + this.step.lanes.length * (LANE_HEIGHT + LANE_GAP);
  }

  private plotWidth(): number {
    return Math.max(this.canvas.clientWidth - LABEL_WIDTH, 1);
  }

  /** Canvas x (CSS pixels) of a time in µs from the step start. */
  xOf(us: number): number {
    return LABEL_WIDTH + ((us - this.v0) / (this.v1 - this.v0)) * this.plotWidth();
  }

  private usOf(x: number): number {
    return this.v0 + ((x - LABEL_WIDTH) / this.plotWidth()) * (this.v1 - this.v0);
  }

  laneY(i: number): number {
    return AXIS_HEIGHT + i * (LANE_HEIGHT + LANE_GAP);
  }

  zoom(factor: number, atUs?: number): void {
    const span = this.v1 - this.v0;
    const at = atUs ?? (this.v0 + this.v1) / 2;
    const next = Math.min(Math.max(span * factor, MIN_SPAN_US), Math.max(this.step.dur_us, MIN_SPAN_US));
    const left = (at - this.v0) / span;
    this.v0 = at - left * next;
    this.v1 = this.v0 + next;
    this.clamp();
    this.draw();
  }

  reset(): void {
    this.v0 = 0;
    this.v1 = Math.max(this.step.dur_us, MIN_SPAN_US);
    this.draw();
  }

  private clamp(): void {
    const span = this.v1 - this.v0;
    const end = Math.max(this.step.dur_us, MIN_SPAN_US);
    if (this.v0 < 0) [this.v0, this.v1] = [0, span];
    if (this.v1 > end) [this.v0, this.v1] = [Math.max(end - span, 0), end];
  }

  private onWheel(e: WheelEvent): void {
    e.preventDefault();
    const rect = this.canvas.getBoundingClientRect();
    this.zoom(e.deltaY > 0 ? 1.25 : 0.8, this.usOf(e.clientX - rect.left));
  }

  private onMove(e: MouseEvent): void {
    const rect = this.canvas.getBoundingClientRect();
    if (this.drag && e.buttons & 1) {
      const dx = e.clientX - this.drag.x;
      if (Math.abs(dx) > 2) this.drag.moved = true;
      const shift = (dx / this.plotWidth()) * (this.drag.v1 - this.drag.v0);
      this.v0 = this.drag.v0 - shift;
      this.v1 = this.drag.v1 - shift;
      this.clamp();
      this.draw();
      return;
    }
    const hit = this.hitTest(e.clientX - rect.left, e.clientY - rect.top);
    if (!hit) {
      this.tooltip.hidden = true;
      return;
    }
    this.tooltip.hidden = false;
    this.tooltip.textContent = describe(this.timeline, hit);
    this.tooltip.style.left = `${e.clientX - rect.left + 12}px`;
    this.tooltip.style.top = `${e.clientY - rect.top + 12}px`;
  }

  private onClick(e: MouseEvent): void {
    if (this.drag?.moved) return;
    const rect = this.canvas.getBoundingClientRect();
    const hit = this.hitTest(e.clientX - rect.left, e.clientY - rect.top);
    if (!hit) return;
    const src = hit.lane.source[hit.index];
    if (src < 0) return;
    const ref = this.timeline.sources[src];
    this.root.dataset.opened = `${ref.path}:${ref.line}`;
    this.host.openSource(ref.path, ref.line);
  }

  /** The event under a canvas point (CSS pixels): the narrowest one drawn there, else the nearest
   * within 3 px on that lane. */
  hitTest(x: number, y: number): Hit | null {
    if (x < LABEL_WIDTH) return null;
    const laneIndex = Math.floor((y - AXIS_HEIGHT) / (LANE_HEIGHT + LANE_GAP));
    const lane = this.step.lanes[laneIndex];
    if (!lane || y - this.laneY(laneIndex) > LANE_HEIGHT) return null;
    let best = -1;
    let bestWidth = Infinity;
    let nearest = -1;
    let nearestGap = 3;
    for (let i = 0; i < lane.start_us.length; i++) {
      const x0 = this.xOf(lane.start_us[i]);
      const x1 = Math.max(this.xOf(lane.start_us[i] + lane.dur_us[i]), x0 + 1);
      if (x >= x0 && x <= x1) {
        if (x1 - x0 < bestWidth) [best, bestWidth] = [i, x1 - x0];
      } else {
        const gap = x < x0 ? x0 - x : x - x1;
        if (gap < nearestGap) [nearest, nearestGap] = [i, gap];
      }
    }
    const index = best >= 0 ? best : nearest;
    return index >= 0 ? { lane, index } : null;
  }

  draw(): void {
    const ratio = window.devicePixelRatio || 1;
    const width = Math.max(this.canvas.clientWidth, LABEL_WIDTH + 100);
    const height = this.height;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const fg = cssVar(this.root, "--msprof-fg", "#222");
    const grid = cssVar(this.root, "--msprof-grid", "#ddd");
    const colours = this.timeline.classes.map((c) => {
      const [name, fallback] = CLASS_COLOURS[c] ?? CLASS_COLOURS.other;
      return cssVar(this.root, name, fallback);
    });
    ctx.font = "11px sans-serif";
    ctx.textBaseline = "middle";
    // time axis: 5 ticks over the visible window
    ctx.fillStyle = fg;
    ctx.strokeStyle = grid;
    for (let t = 0; t <= 5; t++) {
      const us = this.v0 + ((this.v1 - this.v0) * t) / 5;
      const x = this.xOf(us);
      ctx.beginPath();
      ctx.moveTo(x, AXIS_HEIGHT - 4);
      ctx.lineTo(x, height);
      ctx.stroke();
      ctx.fillText(formatUs(us), Math.min(x + 2, width - 60), AXIS_HEIGHT / 2);
    }
    this.step.lanes.forEach((lane, li) => {
      const y = this.laneY(li);
      ctx.fillStyle = fg;
      ctx.fillText(lane.label, 4, y + LANE_HEIGHT / 2, LABEL_WIDTH - 8);
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL_WIDTH, y, width - LABEL_WIDTH, LANE_HEIGHT);
      ctx.clip();
      for (let i = 0; i < lane.start_us.length; i++) {
        const x0 = this.xOf(lane.start_us[i]);
        const x1 = this.xOf(lane.start_us[i] + lane.dur_us[i]);
        if (x1 < LABEL_WIDTH || x0 > width) continue;
        ctx.fillStyle = colours[lane.cls[i]] ?? colours[0];
        // a merged run is drawn lower: it is several tasks, its extent not all busy
        const merged = lane.count[i] > 1;
        ctx.fillRect(x0, merged ? y + 4 : y, Math.max(x1 - x0, 1), merged ? LANE_HEIGHT - 8 : LANE_HEIGHT);
      }
      ctx.restore();
    });
  }

  /** The longest single task linked to a source line (device lanes first): the "hot kernel" the
   * self-test clicks. */
  hotKernel(): Hit | null {
    let best: Hit | null = null;
    for (const kind of ["device", "host"]) {
      for (const lane of this.step.lanes) {
        if (lane.kind !== kind) continue;
        for (let i = 0; i < lane.start_us.length; i++) {
          if (lane.count[i] !== 1 || lane.source[i] < 0) continue;
          if (!best || lane.dur_us[i] > best.lane.dur_us[best.index]) best = { lane, index: i };
        }
      }
      if (best) return best;
    }
    return null;
  }

  /** Client coordinates of the centre of an event as drawn now. */
  centreOf(hit: Hit): { x: number; y: number } {
    const rect = this.canvas.getBoundingClientRect();
    const li = this.step.lanes.indexOf(hit.lane);
    const x0 = this.xOf(hit.lane.start_us[hit.index]);
    const x1 = Math.max(this.xOf(hit.lane.start_us[hit.index] + hit.lane.dur_us[hit.index]), x0 + 1);
    return { x: rect.left + (x0 + x1) / 2, y: rect.top + this.laneY(li) + LANE_HEIGHT / 2 };
  }
}

export function describe(timeline: Timeline, hit: Hit): string {
  const { lane, index: i } = hit;
  const cls = timeline.classes[lane.cls[i]];
  const what = lane.count[i] > 1 ? `${lane.count[i]} ${cls} tasks (${formatUs(lane.busy_us[i])} busy)` : `${timeline.names[lane.name[i]] ?? ""} (${cls})`;
  const src = lane.source[i] >= 0 ? timeline.sources[lane.source[i]] : null;
  return `${what}: ${formatUs(lane.dur_us[i])} at ${formatUs(lane.start_us[i])}${src ? ` · ${src.path}:${src.line}` : ""}`;
}

/** The timeline section: step selector, zoom buttons, legend, canvas and the lane list. */
export function renderTimeline(root: HTMLElement, timeline: Timeline, host: ReportHost): { section: HTMLElement; view: () => StepView | null } {
  const section = el("section", { class: "msprof-timeline" }, el("h3", {}, "Timeline"));
  if (!timeline.steps.length) {
    section.append(el("p", { class: "msprof-note" }, "No device tasks or host ops with timestamps: nothing to draw."));
    return { section, view: () => null };
  }
  const tooltip = el("div", { class: "msprof-tooltip", hidden: true });
  const holder = el("div", { class: "msprof-canvas-holder" });
  const lanes = el("ul", { class: "msprof-lanes" });
  let current: StepView | null = null;
  const show = (i: number) => {
    current = new StepView(root, timeline, timeline.steps[i], host, tooltip);
    holder.replaceChildren(current.canvas, tooltip);
    lanes.replaceChildren(
      ...timeline.steps[i].lanes.map((l) =>
        el("li", { class: "msprof-lane", "data-lane": l.id, "data-kind": l.kind },
          `${l.label}: ${l.tasks} ${l.kind === "host" ? "ops" : "tasks"}, ${l.start_us.length} drawn`)),
    );
    requestAnimationFrame(() => current?.draw());
    current.draw();
  };
  const controls = el("div", { class: "msprof-controls" });
  if (timeline.steps.length > 1) {
    const select = el("select", { class: "msprof-step-select", "aria-label": "step" });
    timeline.steps.forEach((s, i) => {
      const label = `${s.step >= 0 ? `step ${s.step}` : "capture"} · ${formatUs(s.dur_us)}${i === timeline.chosen ? " (slowest)" : ""}`;
      select.append(el("option", { value: i, selected: i === timeline.chosen }, label));
    });
    select.addEventListener("change", () => show(Number(select.value)));
    controls.append(select);
  }
  const button = (label: string, action: () => void) => {
    const b = el("button", { type: "button" }, label);
    b.addEventListener("click", action);
    return b;
  };
  controls.append(
    button("+", () => current?.zoom(0.5)),
    button("−", () => current?.zoom(2)),
    button("reset", () => current?.reset()),
  );
  const legend = el("div", { class: "msprof-legend" },
    ...timeline.classes.map((c) => el("span", { class: `msprof-key msprof-key-${c}` }, c)));
  const shown = timeline.steps[timeline.chosen];
  section.append(
    el("p", { class: "msprof-note" },
      `${timeline.steps.length} of ${timeline.steps_total} steps carried; shown first: ${shown.step >= 0 ? `step ${shown.step}` : "the capture"} (the slowest). ` +
      "Wheel to zoom, drag to pan, click a task to go to its source line. Thin bars are runs of short tasks merged."),
    controls, legend, holder, lanes);
  show(timeline.chosen);
  window.addEventListener("resize", () => current?.draw());
  return { section, view: () => current };
}
