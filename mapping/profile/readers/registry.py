"""The one table of readers. A new producer is one module defining ``READER`` plus one line here.

Order matters only where two probes could both claim something: discovery offers each folder and
file to the probes in this order and the first that recognises it wins (a torch_npu result is
claimed by the DB reader only when it is DB-only).
"""

from __future__ import annotations

from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.profile.readers import kineto, msprof_cli, torch_npu, torch_npu_db
from msprof_lsp.mapping.profile.readers.protocol import Reader

READERS: tuple[Reader, ...] = (
    torch_npu_db.READER,
    torch_npu.READER,
    msprof_cli.READER,
    kineto.READER,
)

_BY_KIND = {r.kind: r for r in READERS}


def reader_for(kind: ProfileKind, path: object = "") -> Reader:
    """The reader of ``kind``; ProfileError (naming ``path``) when this build has none."""
    found = _BY_KIND.get(kind)
    if found is None:
        raise ProfileError(str(path), f"this build has no reader for {kind.value} profiles")
    return found
