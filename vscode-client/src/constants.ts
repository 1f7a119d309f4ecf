// Names shared with the Python server (server/protocol.py) and the manifest (package.json).
// The Python test tests/test_vscode_manifest.py keeps package.json and protocol.py in step.

export const SECTION = "msprof-lsp";
export const CLIENT_ID = "msprof-lsp";
export const CLIENT_NAME = "msprof-lsp";

/** Server commands (workspace/executeCommand), as in server/protocol.py. */
export const CMD_RELOAD = "msprof-lsp.reloadProfile";
export const CMD_SELECT_PROFILE = "msprof-lsp.selectProfile";
export const CMD_SHOW_HOTSPOTS = "msprof-lsp.showHotspots";
export const CMD_SET_BASELINE = "msprof-lsp.setBaseline";
export const CMD_LINE_HEAT = "msprof-lsp.lineHeat";
export const CMD_SHOW_OPERATORS = "msprof-lsp.showOperators";
/** [] -> the report model of the loaded job (src/report/model.ts), or null. */
export const CMD_REPORT_MODEL = "msprof-lsp.reportModel";

/** Commands the client implements itself (not sent to the server). */
export const CMD_RESTART = "msprof-lsp.restart";
export const CMD_SHOW_LOGS = "msprof-lsp.showLogs";
/** Status bar click target; internal, so not contributed to the palette. */
export const CMD_STATUS_MENU = "msprof-lsp.statusMenu";
/** Opens a source location (a SourceTarget); the target of tree items and webview clicks. Internal. */
export const CMD_OPEN_SOURCE = "msprof-lsp.openSource";
/** The Hotspots view's refresh button. */
export const CMD_REFRESH_HOTSPOTS = "msprof-lsp.refreshHotspots";

/** Opens the "Show profile" webview. */
export const CMD_SHOW_PROFILE = "msprof-lsp.showProfile";
/** The webview panel's view type. */
export const VIEW_PROFILE = "msprof-lsp.profile";

/** The Hotspots tree view in the Explorer. */
export const VIEW_HOTSPOTS = "msprof-lsp.hotspots";

export const NOTIFY_PROFILE_STATUS = "msprof-lsp/profileStatus";

/** Settings the client reads itself; every other `msprof-lsp.*` setting belongs to the server. */
export const CLIENT_ONLY_SETTINGS: readonly string[] = ["interpreter", "trace.server", "gutterHeat", "showNotifications", "recordCommand"];

/** Context key set while the server runs (enables the server commands in the palette). */
export const CONTEXT_SERVER_RUNNING = "msprof-lsp.serverRunning";

export const SERVER_MODULE = "msprof_lsp.server";
/**
 * Interpreter flags for every Python the client starts with the workspace folder as cwd (the
 * server and the import check): `-I` keeps the cwd off sys.path, so a workspace's `numpy.py` or
 * `msprof_lsp/` folder is never imported (it also ignores PYTHON* variables and the user
 * site-packages). tests/server/lsp/test_lsp_no_workspace_imports.py reads this line to start the server the same way.
 */
export const PYTHON_FLAGS: readonly string[] = ["-I"];
/** The distribution as pip and importlib.metadata name it. */
export const DISTRIBUTION = "msprof-lsp";
/** pyproject.toml's requires-python floor (test/vsix.test.ts keeps the two equal). */
export const MIN_PYTHON: readonly [number, number] = [3, 10];
/** Folder of the .vsix that holds the product's wheel (scripts/bundle_wheel.py writes it). */
export const BUNDLED_DIR = "bundled";
/** bundled/'s folder of dependency wheels in a platform .vsix (scripts/bundle_wheels.py WHEELS_DIR). */
export const BUNDLED_WHEELS_DIR = "wheels";
