"""The Python API (docs/python-api.md): ``msprof_lsp.analyse`` and what it returns."""

from .result import Analysis, FindingView, analyse

__all__ = ["Analysis", "FindingView", "analyse"]
