"use strict";
var MsprofReport = (() => {
  var __defProp = Object.defineProperty;
  var __getOwnPropDesc = Object.getOwnPropertyDescriptor;
  var __getOwnPropNames = Object.getOwnPropertyNames;
  var __hasOwnProp = Object.prototype.hasOwnProperty;
  var __defNormalProp = (obj, key, value) => key in obj ? __defProp(obj, key, { enumerable: true, configurable: true, writable: true, value }) : obj[key] = value;
  var __export = (target, all) => {
    for (var name in all)
      __defProp(target, name, { get: all[name], enumerable: true });
  };
  var __copyProps = (to, from, except, desc) => {
    if (from && typeof from === "object" || typeof from === "function") {
      for (let key of __getOwnPropNames(from))
        if (!__hasOwnProp.call(to, key) && key !== except)
          __defProp(to, key, { get: () => from[key], enumerable: !(desc = __getOwnPropDesc(from, key)) || desc.enumerable });
    }
    return to;
  };
  var __toCommonJS = (mod) => __copyProps(__defProp({}, "__esModule", { value: true }), mod);
  var __publicField = (obj, key, value) => __defNormalProp(obj, typeof key !== "symbol" ? key + "" : key, value);

  // src/report/index.ts
  var index_exports = {};
  __export(index_exports, {
    MODEL_ELEMENT_ID: () => MODEL_ELEMENT_ID,
    ROOT_ELEMENT_ID: () => ROOT_ELEMENT_ID,
    anchorOf: () => anchorOf,
    denominator: () => denominator,
    pageHost: () => pageHost,
    renderReport: () => renderReport,
    selfTest: () => selfTest
  });

  // src/report/dom.ts
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === void 0 || value === false) continue;
      node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === void 0 || child === false) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  var US = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
  function formatUs(us) {
    if (us === null || us === void 0) return "n/a";
    if (Math.abs(us) >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
    if (Math.abs(us) >= 1e4) return `${(us / 1e3).toFixed(1)} ms`;
    return `${US.format(us)} µs`;
  }
  function formatShare(share) {
    return `${(share * 100).toFixed(1)}%`;
  }
  function cssVar(root, name, fallback) {
    const v = getComputedStyle(root).getPropertyValue(name).trim();
    return v || fallback;
  }

  // src/report/timeline.ts
  var LANE_HEIGHT = 22;
  var LANE_GAP = 4;
  var LABEL_WIDTH = 150;
  var AXIS_HEIGHT = 18;
  var MIN_SPAN_US = 0.05;
  var CLASS_COLOURS = {
    compute: ["--msprof-compute", "#3f7fd8"],
    memcpy: ["--msprof-memcpy", "#2ea36b"],
    communication: ["--msprof-communication", "#d9822b"],
    wait: ["--msprof-wait", "#b0b0b0"],
    other: ["--msprof-other", "#7a6fb0"],
    host: ["--msprof-host", "#9a6b3f"]
  };
  var StepView = class {
    constructor(root, timeline, step, host, tooltip) {
      __publicField(this, "root", root);
      __publicField(this, "timeline", timeline);
      __publicField(this, "step", step);
      __publicField(this, "host", host);
      __publicField(this, "tooltip", tooltip);
      __publicField(this, "canvas");
      __publicField(this, "v0", 0);
      __publicField(this, "v1");
      __publicField(this, "drag", null);
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
    get height() {
      return AXIS_HEIGHT + this.step.lanes.length * (LANE_HEIGHT + LANE_GAP);
    }
    plotWidth() {
      return Math.max(this.canvas.clientWidth - LABEL_WIDTH, 1);
    }
    /** Canvas x (CSS pixels) of a time in µs from the step start. */
    xOf(us) {
      return LABEL_WIDTH + (us - this.v0) / (this.v1 - this.v0) * this.plotWidth();
    }
    usOf(x) {
      return this.v0 + (x - LABEL_WIDTH) / this.plotWidth() * (this.v1 - this.v0);
    }
    laneY(i) {
      return AXIS_HEIGHT + i * (LANE_HEIGHT + LANE_GAP);
    }
    zoom(factor, atUs) {
      const span = this.v1 - this.v0;
      const at = atUs ?? (this.v0 + this.v1) / 2;
      const next = Math.min(Math.max(span * factor, MIN_SPAN_US), Math.max(this.step.dur_us, MIN_SPAN_US));
      const left = (at - this.v0) / span;
      this.v0 = at - left * next;
      this.v1 = this.v0 + next;
      this.clamp();
      this.draw();
    }
    reset() {
      this.v0 = 0;
      this.v1 = Math.max(this.step.dur_us, MIN_SPAN_US);
      this.draw();
    }
    clamp() {
      const span = this.v1 - this.v0;
      const end = Math.max(this.step.dur_us, MIN_SPAN_US);
      if (this.v0 < 0) [this.v0, this.v1] = [0, span];
      if (this.v1 > end) [this.v0, this.v1] = [Math.max(end - span, 0), end];
    }
    onWheel(e) {
      e.preventDefault();
      const rect = this.canvas.getBoundingClientRect();
      this.zoom(e.deltaY > 0 ? 1.25 : 0.8, this.usOf(e.clientX - rect.left));
    }
    onMove(e) {
      const rect = this.canvas.getBoundingClientRect();
      if (this.drag && e.buttons & 1) {
        const dx = e.clientX - this.drag.x;
        if (Math.abs(dx) > 2) this.drag.moved = true;
        const shift = dx / this.plotWidth() * (this.drag.v1 - this.drag.v0);
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
    onClick(e) {
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
    hitTest(x, y) {
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
    draw() {
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
      ctx.fillStyle = fg;
      ctx.strokeStyle = grid;
      for (let t = 0; t <= 5; t++) {
        const us = this.v0 + (this.v1 - this.v0) * t / 5;
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
          const merged = lane.count[i] > 1;
          ctx.fillRect(x0, merged ? y + 4 : y, Math.max(x1 - x0, 1), merged ? LANE_HEIGHT - 8 : LANE_HEIGHT);
        }
        ctx.restore();
      });
    }
    /** The longest single task linked to a source line (device lanes first): the "hot kernel" the
     * self-test clicks. */
    hotKernel() {
      let best = null;
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
    centreOf(hit) {
      const rect = this.canvas.getBoundingClientRect();
      const li = this.step.lanes.indexOf(hit.lane);
      const x0 = this.xOf(hit.lane.start_us[hit.index]);
      const x1 = Math.max(this.xOf(hit.lane.start_us[hit.index] + hit.lane.dur_us[hit.index]), x0 + 1);
      return { x: rect.left + (x0 + x1) / 2, y: rect.top + this.laneY(li) + LANE_HEIGHT / 2 };
    }
  };
  function describe(timeline, hit) {
    const { lane, index: i } = hit;
    const cls = timeline.classes[lane.cls[i]];
    const what = lane.count[i] > 1 ? `${lane.count[i]} ${cls} tasks (${formatUs(lane.busy_us[i])} busy)` : `${timeline.names[lane.name[i]] ?? ""} (${cls})`;
    const src = lane.source[i] >= 0 ? timeline.sources[lane.source[i]] : null;
    return `${what}: ${formatUs(lane.dur_us[i])} at ${formatUs(lane.start_us[i])}${src ? ` · ${src.path}:${src.line}` : ""}`;
  }
  function renderTimeline(root, timeline, host) {
    const section = el("section", { class: "msprof-timeline" }, el("h3", {}, "Timeline"));
    if (!timeline.steps.length) {
      section.append(el("p", { class: "msprof-note" }, "No device tasks or host ops with timestamps: nothing to draw."));
      return { section, view: () => null };
    }
    const tooltip = el("div", { class: "msprof-tooltip", hidden: true });
    const holder = el("div", { class: "msprof-canvas-holder" });
    const lanes = el("ul", { class: "msprof-lanes" });
    let current = null;
    const show = (i) => {
      current = new StepView(root, timeline, timeline.steps[i], host, tooltip);
      holder.replaceChildren(current.canvas, tooltip);
      lanes.replaceChildren(
        ...timeline.steps[i].lanes.map((l) => el(
          "li",
          { class: "msprof-lane", "data-lane": l.id, "data-kind": l.kind },
          `${l.label}: ${l.tasks} ${l.kind === "host" ? "ops" : "tasks"}, ${l.start_us.length} drawn`
        ))
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
    const button = (label, action) => {
      const b = el("button", { type: "button" }, label);
      b.addEventListener("click", action);
      return b;
    };
    controls.append(
      button("+", () => current?.zoom(0.5)),
      button("−", () => current?.zoom(2)),
      button("reset", () => current?.reset())
    );
    const legend = el(
      "div",
      { class: "msprof-legend" },
      ...timeline.classes.map((c) => el("span", { class: `msprof-key msprof-key-${c}` }, c))
    );
    const shown = timeline.steps[timeline.chosen];
    section.append(
      el(
        "p",
        { class: "msprof-note" },
        `${timeline.steps.length} of ${timeline.steps_total} steps carried; shown first: ${shown.step >= 0 ? `step ${shown.step}` : "the capture"} (the slowest). Wheel to zoom, drag to pan, click a task to go to its source line. Thin bars are runs of short tasks merged.`
      ),
      controls,
      legend,
      holder,
      lanes
    );
    show(timeline.chosen);
    window.addEventListener("resize", () => current?.draw());
    return { section, view: () => current };
  }

  // src/report/index.ts
  var MODEL_ELEMENT_ID = "msprof-report-model";
  var ROOT_ELEMENT_ID = "msprof-report";
  var SEGMENTS = [
    ["computing_us", "computing"],
    ["communication_not_overlapped_us", "communication"],
    ["free_us", "free"]
  ];
  function breakdown(job) {
    const section = el(
      "section",
      { class: "msprof-breakdown" },
      el("h3", {}, "Step breakdown"),
      el(
        "p",
        { class: "msprof-note" },
        `Per step${job.ranks.length ? " and rank" : ""}: computing, communication not overlapped by computing, free (${job.profile.breakdown_source}).`
      )
    );
    const max = Math.max(1e-9, ...job.breakdown.map((b) => b.step_us ?? 0));
    const legend = el(
      "div",
      { class: "msprof-legend" },
      ...SEGMENTS.map(([, name]) => el("span", { class: `msprof-key msprof-seg-${name}` }, name))
    );
    const bars = el("div", { class: "msprof-bars" });
    for (const b of job.breakdown) {
      const bar = el("div", { class: "msprof-bar", "data-rank": b.rank, "data-step": b.step });
      const track = el("div", { class: "msprof-track" });
      for (const [key, name] of SEGMENTS) {
        const v = b[key];
        const seg = el("div", { class: `msprof-seg msprof-seg-${name}`, title: `${name}: ${formatUs(v)}` });
        seg.style.width = `${100 * (v ?? 0) / max}%`;
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
  function rankBars(ranks) {
    const section = el(
      "section",
      { class: "msprof-ranks" },
      el("h3", {}, "Ranks"),
      el("p", { class: "msprof-note" }, "Step time per rank, with its communication not overlapped; the slowest rank is marked.")
    );
    const max = Math.max(1e-9, ...ranks.map((r) => r.step_time_us));
    for (const r of ranks) {
      const row = el("div", { class: `msprof-rank-bar${r.slowest ? " msprof-slowest" : ""}`, "data-rank": r.rank, "data-slowest": r.slowest });
      const track = el("div", { class: "msprof-track" });
      const rest = el("div", { class: "msprof-seg msprof-seg-computing" });
      const comm = el("div", { class: "msprof-seg msprof-seg-communication" });
      rest.style.width = `${100 * Math.max(r.step_time_us - r.comm_not_overlapped_us, 0) / max}%`;
      comm.style.width = `${100 * r.comm_not_overlapped_us / max}%`;
      track.append(rest, comm);
      row.append(
        el("span", { class: "msprof-bar-label" }, `rank ${r.rank}${r.slowest ? " (slowest)" : ""}${r.analysed ? " · analysed" : ""}`),
        track,
        el("span", { class: "msprof-bar-value" }, `${formatUs(r.step_time_us)} · comm ${formatUs(r.comm_not_overlapped_us)}`)
      );
      section.append(row);
    }
    return section;
  }
  function heatmap(comm) {
    const section = el("section", { class: "msprof-heatmap" }, el("h3", {}, "Communication matrix"));
    const modes = [
      ["transit time per step", comm.transit_ms, (v) => `${v.toFixed(3)} ms`],
      ["bandwidth", comm.bandwidth_gbps, (v) => `${v.toFixed(2)} GB/s`]
    ];
    const table = el("table", { class: "msprof-matrix" });
    const draw = (mode) => {
      const [what, values, fmt] = modes[mode];
      const flat = values.flat().filter((v) => v !== null);
      const hi = Math.max(1e-12, ...flat);
      const head = el("tr", {}, el("th", {}, "src \\ dst"), ...comm.ranks.map((r) => el("th", {}, String(r))));
      const rows = comm.ranks.map((src, i) => el("tr", {}, el("th", {}, String(src)), ...comm.ranks.map((dst, j) => {
        const v = values[i][j];
        const cell = el(
          "td",
          { class: "msprof-cell", "data-src": src, "data-dst": dst, title: `${src} → ${dst}: ${v === null ? "no link" : fmt(v)} (${what})` },
          v === null ? "–" : fmt(v)
        );
        if (v !== null) cell.style.setProperty("--msprof-heat", String(v / hi));
        return cell;
      })));
      table.replaceChildren(head, ...rows);
    };
    const select = el(
      "select",
      { class: "msprof-matrix-mode", "aria-label": "matrix figure" },
      ...modes.map(([what], i) => el("option", { value: i }, what))
    );
    select.addEventListener("change", () => draw(Number(select.value)));
    draw(0);
    section.append(el("p", { class: "msprof-note" }, "Rank × rank, from the ranks' communication matrices (sums of each op type's total per link)."), select, table);
    return section;
  }
  function denominator(shareOf) {
    return `the ${shareOf.replace("-", " ")}`;
  }
  function startHere(items, host) {
    if (!items.length) return null;
    const list = el("ol", { class: "msprof-start-list" });
    for (const s of items) {
      const where = s.path !== null && s.line !== null ? `${s.path}:${s.line}` : "(profile)";
      const link = el("a", { href: "#", class: "msprof-start-where" }, where);
      link.addEventListener("click", (ev) => {
        ev.preventDefault();
        if (s.path !== null && s.line !== null) host.openSource(s.path, s.line);
      });
      list.append(el(
        "li",
        { class: "msprof-start-item", "data-code": s.code, "data-rank": s.rank },
        el("strong", {}, `${s.code} ${s.name}`),
        " · ",
        link,
        el("div", { class: "msprof-start-saving" }, s.saving),
        el("div", { class: "msprof-start-change" }, `change: ${s.change}`)
      ));
    }
    return el(
      "section",
      { class: "msprof-start-here" },
      el("h2", {}, "Start here"),
      el("p", { class: "msprof-note" }, "The findings with the biggest saving per step (unknown savings by their share)."),
      list
    );
  }
  function findingItem(f) {
    const item = el(
      "li",
      { class: `msprof-finding msprof-sev-${f.severity}`, "data-code": f.code },
      el("strong", {}, `${f.code} ${f.name}`),
      ` ${f.severity} · ${f.saving} · ${formatShare(f.share)} of ${denominator(f.share_of)}`,
      el("p", {}, f.message)
    );
    for (const fix of f.fixes) {
      const body = fix.diff ? el("pre", { class: "msprof-diff" }, ...fix.diff.split("\n").map((line) => el("span", { class: `msprof-line${line.startsWith("+") && !line.startsWith("+++") ? " msprof-add" : line.startsWith("-") && !line.startsWith("---") ? " msprof-del" : ""}` }, line))) : el("p", { class: "msprof-note" }, "The file could not be read: no diff.");
      item.append(el("details", { class: "msprof-fix" }, el("summary", {}, `fix${fix.safe ? "" : " (review)"}: ${fix.title}`), body));
    }
    return item;
  }
  function hotspots(job) {
    const section = el(
      "section",
      { class: "msprof-hotspots" },
      el("h3", {}, "Hotspots"),
      el("p", { class: "msprof-note" }, "Device time per step by source line, with the findings on each line and their fixes as diffs.")
    );
    const table = el(
      "table",
      { class: "msprof-hotspot-table" },
      el("tr", {}, el("th", {}, "share"), el("th", {}, "time/step"), el("th", {}, "location / source"))
    );
    for (const h of job.hotspots) {
      const snippet = el("pre", { class: "msprof-snippet" }, ...h.snippet.map((s) => el("span", { class: `msprof-line${s.line >= h.line && s.line <= h.end_line ? " msprof-hot-line" : ""}` }, `${String(s.line).padStart(5)}  ${s.text}`)));
      const findings = el("ul", { class: "msprof-findings" }, ...h.findings.map((i) => findingItem(job.findings[i])));
      table.append(el(
        "tr",
        { class: "msprof-hotspot", "data-path": h.path, "data-line": h.line, id: anchorOf(h.path, h.line) },
        el("td", {}, formatShare(h.share)),
        el("td", {}, formatUs(h.device_time_us)),
        el(
          "td",
          {},
          el("div", { class: "msprof-loc" }, `${h.path}:${h.line}`),
          el("div", { class: "msprof-ops" }, h.ops.join(", ")),
          snippet,
          h.findings.length ? findings : null
        )
      ));
    }
    if (!job.hotspots.length) table.append(el("tr", {}, el("td", { colspan: 3 }, "No device time reached a source line.")));
    section.append(table);
    const elsewhere = job.findings.filter((_, i) => !job.hotspots.some((h) => h.findings.includes(i)));
    if (elsewhere.length) {
      section.append(el("h4", {}, "Other findings"), el("ul", { class: "msprof-findings" }, ...elsewhere.map(findingItem)));
    }
    return section;
  }
  function anchorOf(path, line) {
    return `msprof-src-${path.replace(/[^A-Za-z0-9_-]/g, "_")}-${line}`;
  }
  function header(job) {
    const p = job.profile;
    const rank = p.rank !== null ? ` · rank ${p.rank}${p.ranks.length > 1 ? ` of ${p.ranks.length}` : ""}` : "";
    return el(
      "header",
      {},
      el("h2", {}, `${p.kind} profile`),
      el("div", { class: "msprof-path" }, p.path),
      el("p", {}, `${p.steps} steps · step ${formatUs(p.step_time_us)} on device · ${formatShare(p.mapped_share)} of device time mapped to code${rank}`)
    );
  }
  function renderReport(root, model, host) {
    root.classList.add("msprof-report");
    root.replaceChildren();
    const start2 = startHere(model.start_here ?? [], host);
    if (start2) root.append(start2);
    const views = [];
    model.jobs.forEach((job, i) => {
      const article = el("article", { class: "msprof-job", "data-job": i });
      root.append(article);
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
  function pageHost(doc) {
    return {
      openSource(path, line) {
        doc.querySelectorAll(".msprof-target").forEach((n) => n.classList.remove("msprof-target"));
        const row = doc.getElementById(anchorOf(path, line));
        if (row) {
          row.classList.add("msprof-target");
          row.scrollIntoView({ block: "center" });
        }
      }
    };
  }
  function selfTest(root, views) {
    const view = views[0];
    if (view) {
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
  function start() {
    const data = document.getElementById(MODEL_ELEMENT_ID);
    const root = document.getElementById(ROOT_ELEMENT_ID);
    if (!data || !root) return;
    const t0 = performance.now();
    const model = JSON.parse(data.textContent ?? "{}");
    const views = renderReport(root, model, pageHost(document));
    root.dataset.rendered = "true";
    root.dataset.renderMs = (performance.now() - t0).toFixed(1);
    if (location.hash === "#selftest=click") selfTest(root, views);
  }
  if (typeof document !== "undefined") {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
    else start();
  }
  return __toCommonJS(index_exports);
})();
