"""Run ``msprof-lsp`` under an audit hook that records network sockets and writes (test launcher).

    python -I -B tests/security/audited_run.py REPORT.json ALLOWED_ROOT ... -- MSPROF_LSP_ARGS ...

Every ``socket.*`` audit event and every file-system change (``open`` for writing, ``os.mkdir``,
``os.rename``/``os.replace``, ``os.remove``, ...) is recorded; at exit REPORT.json holds them as
``{"sockets": [...], "writes": [...]}`` with each entry marked allowed or not. Writes are allowed
under the ALLOWED_ROOTs and in the process pool's private ``pymp-*`` folder (multiprocessing's own,
for its control socket). Network sockets are never allowed; AF_UNIX sockets (asyncio's self-pipe,
the pool's forkserver) are recorded as such. Run with ``-B`` so Python's own bytecode caching is
not counted.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import tempfile

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
FS_EVENTS = {
    "os.mkdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1), "os.remove": (0,), "os.rmdir": (0,),
    "os.link": (0, 1), "os.symlink": (0, 1), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.utime": (0,), "shutil.rmtree": (0,), "shutil.move": (0, 1), "shutil.copyfile": (1,),
}
SOCKET_USE = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}
NAME_LOOKUPS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr",
                "socket.getnameinfo", "socket.gethostname", "socket.sethostname"}


def main() -> int:
    report_path = sys.argv[1]
    sep = sys.argv.index("--")
    allowed = [os.path.realpath(p) for p in sys.argv[2:sep]]
    args = sys.argv[sep + 1:]
    tmp = os.path.realpath(tempfile.gettempdir())
    sockets: list[dict] = []
    writes: list[dict] = []
    state = {"on": True}

    def ok_path(path: object) -> bool:
        if isinstance(path, int):  # a descriptor we already opened
            return True
        text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
        real = os.path.realpath(text)
        if any(real == root or real.startswith(root + os.sep) for root in allowed):
            return True
        rel = os.path.relpath(real, tmp)
        return rel.startswith("pymp-") and ".." not in rel

    def hook(event: str, hargs: tuple) -> None:
        if not state["on"]:
            return
        if event == "open":
            path, mode, flags = hargs
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & WRITE_FLAGS)
            if writing:
                writes.append({"event": event, "path": os.fsdecode(path) if not isinstance(path, int) else path,
                               "allowed": ok_path(path)})
        elif event in FS_EVENTS:
            # (path, ..., dir_fd): shutil.rmtree removes entries relative to a directory descriptor
            dir_fd = hargs[-1] if len(hargs) > 1 and isinstance(hargs[-1], int) else None
            for i in FS_EVENTS[event]:
                if i < len(hargs) and not isinstance(hargs[i], int):
                    path = os.fsdecode(hargs[i])
                    if dir_fd is not None and not os.path.isabs(path):
                        path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
                    writes.append({"event": event, "path": path, "allowed": ok_path(path)})
        elif event == "socket.__new__":
            family = hargs[1]
            sockets.append({"event": event, "family": int(family), "allowed": family == socket.AF_UNIX})
        elif event in SOCKET_USE:  # (socket, address): local only on an AF_UNIX socket
            sockets.append({"event": event, "address": repr(hargs[1]),
                            "allowed": getattr(hargs[0], "family", None) == socket.AF_UNIX})
        elif event in NAME_LOOKUPS:
            sockets.append({"event": event, "address": repr(hargs), "allowed": False})
        elif event == "sqlite3.connect":
            database = str(hargs[0])
            writes.append({"event": event, "path": database, "allowed": "mode=ro" in database})

    def dump() -> None:
        state["on"] = False
        with open(report_path, "w", encoding="utf-8") as f:
            json.dump({"sockets": sockets, "writes": writes}, f, indent=1)

    atexit.register(dump)
    sys.addaudithook(hook)
    from msprof_lsp.server.__main__ import main as product_main

    return product_main(args)


if __name__ == "__main__":
    sys.exit(main())
