// What VS Code does with a contributed single-line problem matcher, for the tests: the pattern's
// regexp on each line, its group numbers, the severity words VS Code knows ("hint" and unknown
// words fall back as VS Code's matcher does: hint -> info, else the matcher's default, error),
// and `fileLocation` autoDetect (relative paths against the workspace folder).

import { isAbsolute, join } from "node:path";

export interface Pattern {
  regexp: string;
  file: number;
  line: number;
  column: number;
  severity: number;
  code: number;
  message: number;
}

export interface Matcher {
  name: string;
  owner: string;
  fileLocation: string | string[];
  pattern: Pattern;
}

export interface Marker {
  file: string;
  line: number;
  column: number;
  severity: "error" | "warning" | "info";
  code: string;
  message: string;
}

function severity(word: string): Marker["severity"] {
  const w = word.toLowerCase();
  if (w === "error") return "error";
  if (w === "warning" || w === "warn") return "warning";
  if (w === "info" || w === "hint" || w === "note") return "info";
  return "error";
}

export function applyMatcher(matcher: Matcher, output: string, workspaceFolder: string): Marker[] {
  const re = new RegExp(matcher.pattern.regexp);
  const p = matcher.pattern;
  const markers: Marker[] = [];
  for (const line of output.split(/\r?\n/)) {
    const m = re.exec(line);
    if (!m || !m[p.message]) continue;
    const file = m[p.file];
    markers.push({
      file: isAbsolute(file) ? file : join(workspaceFolder, file),
      line: Number(m[p.line]),
      column: Number(m[p.column]),
      severity: severity(m[p.severity]),
      code: m[p.code],
      message: m[p.message],
    });
  }
  return markers;
}
