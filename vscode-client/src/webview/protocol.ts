// Messages between the "Show profile" webview page and the extension (both sides import this).

/** Extension -> page: the model to draw (null: nothing loaded, with `note` saying why). */
export interface ModelMessage {
  type: "model";
  model: unknown;
  note: string;
}
export type ToPage = ModelMessage;

/** Page -> extension: the page is listening; open `path` (relative to the model's base) at 1-based `line`. */
export type FromPage = { type: "ready" } | { type: "open"; path: string; line: number };
