"""``msprof-lsp mcp``: the MCP server on stdio (docs/agents.md), on the official SDK's MCPServer.
The only module that imports ``mcp``; the answers come from ``tools`` over the one check run.

Every tool reads; none writes a file (``propose_fix`` returns a diff). A bad argument, a path
outside the workspace or a broken profile is an error result with one line, and the session goes
on; the analyses are kept between calls (``RunCache``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from msprof_lsp.mapping.errors import NoProfileFound, ProfileError
from msprof_lsp.mapping.profile.safe_io import describe_unexpected

from ..analysis.settings import parse_path_mapping
from ..api.workspace_run import Request, RequestError, RunCache
from ..cli import version
from ..escape import visible
from . import tools

INSTRUCTIONS = (
    "Profile-guided optimisation hints for PyTorch training (Ascend NPU, CUDA and CPU profiles). Call "
    "analyse on the workspace first: its start_here ids are the findings with the biggest modelled saving; "
    "explain_line shows a line's device time, operators and kernels; propose_fix returns a unified diff to "
    "apply (nothing is written); compare checks a new profile against an earlier one."
)

Workspace = Annotated[str, Field(description="absolute path of the source folder (profiles are discovered under it)")]
Profile = Annotated[str | None, Field(description="profile folder or file inside the workspace (default: discover)")]
PathMap = Annotated[list[str] | None, Field(
    description='["REMOTE=LOCAL", ...]: where paths recorded in the profile differ from the workspace\'s')]
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)


class Tools:
    """The session's state: the cached analyses, and one analysis at a time (tools run on threads)."""

    def __init__(self) -> None:
        self.cache = RunCache()
        self._lock = threading.Lock()

    def answer(self, fn: Callable[..., dict[str, Any]], request: Request | None, *args: Any) -> dict[str, Any]:
        """``fn(run, *args)`` (``fn(*args)`` without a request), failures as one-line error results."""
        try:
            if request is None:
                return fn(*args)
            with self._lock:
                run, notes = self.cache.get(request)
                return fn(run, notes, *args) if fn is tools.analyse else fn(run, *args)
        except NoProfileFound as exc:
            raise ToolError(visible(f"{exc}; profiler_snippet gives a block that records one")) from None
        except (RequestError, ProfileError, ValueError) as exc:
            raise ToolError(visible(str(exc))) from None
        except Exception as exc:  # noqa: BLE001 - an internal error is a result too; the session goes on
            raise ToolError(visible(describe_unexpected(exc))) from None


def request(workspace: str, profile: str | None = None, path_map: list[str] | None = None,
            baseline: str | None = None) -> Request:
    try:
        pairs = tuple(parse_path_mapping(v) for v in path_map or ())
    except ValueError as exc:
        raise ToolError(f"path_map: {exc}") from None
    return Request(workspace=workspace, profile=profile or None, baseline=baseline, path_map=pairs, confined=True)


def build(state: Tools | None = None) -> MCPServer:
    state = state or Tools()
    server = MCPServer("msprof-lsp", version=version(), instructions=INSTRUCTIONS)

    @server.tool(annotations=READ_ONLY)
    def analyse(workspace: Workspace, profile: Profile = None, path_map: PathMap = None) -> dict[str, Any]:
        """Analyse the workspace's profile: summary (kind, ranks, steps, step time, breakdown), findings
        (id, code, path, line, severity, message, share, saving_us_per_step) and start_here (ids)."""
        return state.answer(tools.analyse, request(workspace, profile, path_map))

    @server.tool(annotations=READ_ONLY)
    def explain_line(workspace: Workspace, path: Annotated[str, Field(description="source file, relative to the workspace")],
                     line: Annotated[int, Field(ge=1, description="1-based line")], profile: Profile = None,
                     path_map: PathMap = None) -> dict[str, Any]:
        """A source line's device time per step, its operators and kernels, and the findings on it."""
        req = request(workspace, profile, path_map)
        return state.answer(tools.explain_line, req, req, path, line)

    @server.tool(annotations=READ_ONLY)
    def propose_fix(workspace: Workspace, finding_id: Annotated[str, Field(description="an id from analyse")],
                    profile: Profile = None, path_map: PathMap = None) -> dict[str, Any]:
        """A finding's fix as a unified diff (apply it with git apply in the workspace) and whether it is
        safe (changes no behaviour); the server never writes a file."""
        return state.answer(tools.propose_fix, request(workspace, profile, path_map), finding_id)

    @server.tool(annotations=READ_ONLY)
    def compare(workspace: Workspace, profile: Annotated[str, Field(description="the new profile, inside the workspace")],
                baseline: Annotated[str, Field(description="the earlier profile, inside the workspace")],
                path_map: PathMap = None) -> dict[str, Any]:
        """A new profile against an earlier one: step time and each finding's state (resolved, improved,
        persisting, regressed, new) with before -> after."""
        return state.answer(tools.compare, request(workspace, profile, path_map, baseline))

    @server.tool(annotations=READ_ONLY)
    def profiler_snippet(kind: Literal["npu", "cuda", "cpu"]) -> dict[str, Any]:
        """The block that records a profile msprof-lsp reads, for torch_npu (npu) or torch.profiler."""
        return state.answer(tools.profiler_snippet, None, kind)

    return server


def serve() -> int:
    build().run("stdio")
    return 0
