"""msprof-lsp: profile-guided optimisation hints for PyTorch (docs/python-api.md).

``msprof_lsp.analyse(workspace, profile=..., path_map={...})`` analyses a workspace as
``msprof-lsp --check`` does and returns typed findings and pandas DataFrames.

Nothing is imported here until ``analyse`` is asked for: ``python -m msprof_lsp.server`` runs
this file before it takes the current directory off ``sys.path`` (server/__main__.py).
"""


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy export
    if name in ("analyse", "Analysis", "FindingView"):
        from msprof_lsp.server import api

        return getattr(api, name)
    raise AttributeError(f"module 'msprof_lsp' has no attribute {name!r}")


__all__ = ["analyse", "Analysis", "FindingView"]
