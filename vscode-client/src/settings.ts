// Editor settings -> what the server receives: `initializationOptions` and the answer to
// `workspace/configuration` (section "msprof-lsp") share one flat camelCase shape.
// Plain module: the extension passes in the manifest and a per-key `inspect` function.

import { CLIENT_ONLY_SETTINGS, SECTION } from "./constants";

interface ConfigurationContribution {
  properties?: Record<string, unknown>;
}

export interface ManifestLike {
  contributes?: { configuration?: ConfigurationContribution | ConfigurationContribution[] };
}

/** The server's setting keys (camelCase), read from the manifest minus the client-only ones. */
export function serverSettingKeys(manifest: ManifestLike): string[] {
  const configuration = manifest.contributes?.configuration;
  const blocks = Array.isArray(configuration) ? configuration : configuration ? [configuration] : [];
  const prefix = `${SECTION}.`;
  const keys: string[] = [];
  for (const block of blocks) {
    for (const name of Object.keys(block.properties ?? {})) {
      if (!name.startsWith(prefix)) continue;
      const key = name.slice(prefix.length);
      if (!CLIENT_ONLY_SETTINGS.includes(key)) keys.push(key);
    }
  }
  return keys;
}

/** The subset of vscode's `WorkspaceConfiguration.inspect()` result we use. */
export interface Inspection {
  defaultValue?: unknown;
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/** A JSON copy: vscode hands out frozen proxies, and the server needs plain data. */
function plain(value: unknown): unknown {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}

/**
 * The flat settings object for one scope: only keys the user set explicitly (folder > workspace >
 * user), so `[tool.msprof-lsp]` in pyproject.toml still applies to every key left at its default —
 * sending the manifest defaults would silently override it. Values go as written; the server
 * validates them and warns, which keeps one validator.
 */
export function serverSettings(keys: readonly string[], inspect: (key: string) => Inspection | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of keys) {
    const info = inspect(key);
    if (!info) continue;
    const value = info.workspaceFolderValue !== undefined
      ? info.workspaceFolderValue
      : info.workspaceValue !== undefined
        ? info.workspaceValue
        : info.globalValue;
    if (value !== undefined) out[key] = plain(value);
  }
  return out;
}

export interface ConfigurationItem {
  scopeUri?: string | null;
  section?: string | null;
}

/**
 * Answer a `workspace/configuration` request: items for our section get the flat object (a dotted
 * `msprof-lsp.key` item gets that key's explicit value or null); other sections keep the answer the
 * language client computed.
 */
export function answerConfiguration(
  items: readonly ConfigurationItem[],
  defaultAnswers: readonly unknown[],
  keys: readonly string[],
  flatFor: (scopeUri: string | undefined) => Record<string, unknown>,
): unknown[] {
  return items.map((item, index) => {
    const scope = item.scopeUri ?? undefined;
    if (item.section === SECTION) return flatFor(scope);
    if (item.section && item.section.startsWith(`${SECTION}.`)) {
      const key = item.section.slice(SECTION.length + 1);
      if (keys.includes(key)) {
        const value = flatFor(scope)[key];
        return value === undefined ? null : value;
      }
    }
    return defaultAnswers[index] ?? null;
  });
}

export interface ConfigChange {
  /** The interpreter changed: the server must be restarted. */
  restart: boolean;
  /** A server setting changed: re-send it (workspace/didChangeConfiguration). */
  serverSettings: boolean;
  /** Gutter heat toggled: redraw or clear decorations. */
  gutterHeat: boolean;
}

/** What a configuration change event means for us, given its `affectsConfiguration`. */
export function classifyChange(affects: (section: string) => boolean, keys: readonly string[]): ConfigChange {
  return {
    restart: affects(`${SECTION}.interpreter`),
    serverSettings: keys.some((key) => affects(`${SECTION}.${key}`)),
    gutterHeat: affects(`${SECTION}.gutterHeat`),
  };
}

export type NotificationLevel = "off" | "onError" | "onWarning" | "always";

/** Whether a message of `kind` may pop up under the `msprof-lsp.showNotifications` setting. */
export function shouldNotify(setting: unknown, kind: "error" | "warning" | "info"): boolean {
  const level: NotificationLevel =
    setting === "off" || setting === "onWarning" || setting === "always" || setting === "onError" ? setting : "onError";
  switch (level) {
    case "off":
      return false;
    case "onError":
      return kind === "error";
    case "onWarning":
      return kind !== "info";
    case "always":
      return true;
  }
}
