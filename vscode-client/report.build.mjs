// Builds the report renderer (src/report/) into the one IIFE file and its stylesheet the Python
// package carries (server/check/report/assets/), which the HTML report embeds and the webview
// loads. `--check` builds in memory and fails when the committed files differ (the drift test).
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildSync } from "esbuild";
import process from "node:process";
import console from "node:console";

const here = dirname(fileURLToPath(import.meta.url));
const given = process.argv.find((a) => a.startsWith("--assets="));  // tests point it at a copy
const assets = given ? given.slice("--assets=".length) : join(here, "..", "server", "check", "report", "assets");
const targets = [
  [join(assets, "report.js"), { entryPoints: [join(here, "src", "report", "index.ts")], format: "iife", globalName: "MsprofReport", target: "es2020" }],
  [join(assets, "report.css"), { entryPoints: [join(here, "src", "report", "report.css")] }],
];

let stale = 0;
for (const [out, options] of targets) {
  const result = buildSync({ ...options, bundle: true, write: false, charset: "utf8", legalComments: "none", logLevel: "error", outfile: out });
  const text = result.outputFiles[0].text;
  if (process.argv.includes("--check")) {
    let old = null;
    try {
      old = readFileSync(out, "utf8");
    } catch {
      old = null;
    }
    if (old !== text) {
      console.error(`${out} differs from a fresh build of src/report: run npm run build:report and commit it`);
      stale++;
    }
  } else {
    writeFileSync(out, text);
  }
}
process.exit(stale ? 1 : 0);
