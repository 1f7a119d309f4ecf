// Small DOM helpers for the report renderer: elements are built with createElement and text
// nodes only (never innerHTML), so profile and source text cannot inject markup.

export type Child = Node | string | null | undefined | false;

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number | boolean | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

const US = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });

/** µs as people read them: "812 µs", "16.2 ms", "1.31 s". */
export function formatUs(us: number | null | undefined): string {
  if (us === null || us === undefined) return "n/a";
  if (Math.abs(us) >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
  if (Math.abs(us) >= 1e4) return `${(us / 1e3).toFixed(1)} ms`;
  return `${US.format(us)} µs`;
}

export function formatShare(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}

/** A CSS custom property of the report root (theme colours come from there). */
export function cssVar(root: HTMLElement, name: string, fallback: string): string {
  const v = getComputedStyle(root).getPropertyValue(name).trim();
  return v || fallback;
}
