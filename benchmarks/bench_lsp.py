"""Language-server latency over a real stdio session, as ratios to a no-op round trip measured in
the same run.

    python benchmarks/bench_lsp.py [--blocks 158] [--repeat 60]

Generates a 3,000-line model file (``--blocks`` modules of 20 lines, Chinese text and emoji in
their docstrings) and a torch_npu text profile (tests/synth writers) whose call stacks point at
its lines: every block's ReLU -> Dropout line and Linear lines are hot. The server is the real
one (``python -m msprof_lsp.server`` semantics) with one benchmark rule registered -- a finding
with a cheap safe fix on every ReLU -> Dropout line -- so the numbers are the server's plumbing
(line maps, conversion to UTF-16, JSON-RPC), not the cost of a particular rule's libcst fix.

Prints p50/p95 of: a no-op request (unknown method -> error reply; the baseline), didOpen ->
publishDiagnostics, didChange -> publishDiagnostics (an edit that moves every diagnostic below
it), codeAction on a diagnostic, hover; and the server's RSS when idle after loading and editing.
Targets: diagnostics p95 <= 50 ms, codeAction p95 <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

REMOTE = "/home/ma-user/work/bench"
BLOCK = '''

class Block{k}(nn.Module):
    """Block {k}: 中文说明 😋 (a doc line the UTF-16 conversion has to count)."""

    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.fc1(x)
        h = self.drop(self.act(h))
        out = self.fc2(h)
        if self.training:
            out = out + 0
        return out
'''
HEADER = '''"""Generated benchmark model: {blocks} blocks."""

import torch
import torch.nn as nn
'''


# -- the benchmark rule (registered only in the --serve process) ---------------------------------


def _register_rule() -> None:
    from msprof_lsp.hints.finding import Fix, TextEdit
    from msprof_lsp.hints.registry import Rule, register

    @register
    class PairEverywhere(Rule):
        code = "BNC101"
        name = "bench-relu-dropout"
        summary = "Benchmark rule: every line with ReLU and dropout kernels."
        rationale = "Measures the server, not a rule."

        def check(self, ctx):  # noqa: ANN001, ANN201
            heat = ctx.attribution.heat
            for lh in heat.lines:
                types = {o.type for o in lh.ops}
                if not any(t.startswith("Relu") for t in types) or not any(t.startswith("DropOut") for t in types):
                    continue
                spans = [s for s in heat.spans if s.site.span.path == lh.path and s.site.span.line == lh.line]
                span = max(spans, key=lambda s: s.device_ns).site.span
                fix = Fix("Mark the line", True, (TextEdit(lh.path, lh.line, 0, lh.line, 0, "        # hot\n"),))
                yield ctx.finding(self, span=span, total_ns=lh.device_ns, fixes=[fix],
                                  message=ctx.message("ReLU→Dropout", total_ns=lh.device_ns, diagnosis="dispatch-bound",
                                                      fix="Compile the pair"))


def serve() -> None:
    _register_rule()
    from msprof_lsp.server.__main__ import main

    sys.exit(main([]))


# -- workspace ----------------------------------------------------------------------------------


def build_workspace(root: Path, blocks: int) -> tuple[Path, list[int]]:
    """model.py + a generated profile; returns the model path and the ReLU->Dropout lines."""
    from tests.synth import library as L
    from tests.synth import write_torch_npu_text
    from tests.synth.run import Frame, ModuleFrame, ProfilerConfig, RepeatedSteps, Run, UserCall

    text = HEADER.format(blocks=blocks) + "".join(BLOCK.format(k=k) for k in range(blocks))
    lines = text.split("\n")
    root.mkdir(parents=True, exist_ok=True)
    model = root / "model.py"
    model.write_text(text, encoding="utf-8")
    (root / "train.py").write_text("import model\n", encoding="utf-8")

    def find(after: int, needle: str) -> int:
        return next(i + 1 for i in range(after, len(lines)) if needle in lines[i])

    items = []
    pair_lines = []
    h = (64, 256)
    at = 0
    for k in range(blocks):
        cls = find(at, f"class Block{k}(")
        fwd = find(cls, "def forward(")
        fc1, pair, fc2 = find(fwd, "h = self.fc1(x)"), find(fwd, "h = self.drop("), find(fwd, "out = self.fc2(h)")
        at = fc2
        pair_lines.append(pair)

        def site(line: int, fwd: int = fwd, k: int = k) -> tuple:
            return (Frame(f"{REMOTE}/model.py", line, "forward", fwd), ModuleFrame(f"Block{k}", 0),
                    Frame(f"{REMOTE}/train.py", 1, "<module>"))

        items += [
            UserCall(site(fc1), (L.linear(64, 64, 256, mm_us=6.0 + k % 7),), label=f"fc1.{k}"),
            UserCall(site(pair), (L.relu(h, dur_us=2.0), L.dropout(h, 0.1, genmask_us=3.0, domask_us=2.5)),
                     label=f"pair.{k}"),
            UserCall(site(fc2), (L.linear(64, 256, 64, mm_us=5.0 + k % 5),), label=f"fc2.{k}"),
        ]
    run = Run(steps=RepeatedSteps([tuple(items)], 2), config=ProfilerConfig(), rank=0, world_size=1)
    write_torch_npu_text(run, root / "prof")
    return model, pair_lines


# -- a minimal JSON-RPC client (timestamps taken where the bytes arrive) --------------------------


class Session:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0
        self.pending: dict[int, asyncio.Future] = {}
        self.waiters: list[tuple[str, object, asyncio.Future]] = []
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = 0
            while True:
                line = await out.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            msg = json.loads(await out.readexactly(length))
            now = time.perf_counter()
            if "id" in msg and "method" in msg:  # a request from the server: accept it
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            elif "id" in msg:
                fut = self.pending.pop(msg["id"], None)
                if fut and not fut.done():
                    fut.set_result((now, msg))
            else:
                for w in list(self.waiters):
                    method, pred, fut = w
                    if msg.get("method") == method and pred(msg.get("params")) and not fut.done():
                        fut.set_result((now, msg))
                        self.waiters.remove(w)

    def _send(self, msg: dict) -> None:
        body = json.dumps(msg).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def request(self, method: str, params: object) -> asyncio.Future:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return fut

    def notify(self, method: str, params: object) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def expect(self, method: str, pred) -> asyncio.Future:  # noqa: ANN001
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((method, pred, fut))
        return fut


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def bench(blocks: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-lsp-") as tmp:
        root = Path(tmp) / "ws"
        t0 = time.perf_counter()
        model, pair_lines = build_workspace(root, blocks)
        text = model.read_text(encoding="utf-8")
        n_lines = text.count("\n") + 1
        print(f"workspace: model.py {n_lines} lines, {len(pair_lines)} ReLU->Dropout lines, "
              f"profile written in {time.perf_counter() - t0:.1f} s")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=None if os.environ.get("BENCH_LSP_STDERR") else asyncio.subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
        s = Session(proc)
        uri = model.as_uri()
        caps = {"textDocument": {"publishDiagnostics": {"relatedInformation": True, "codeDescriptionSupport": True},
                                 "codeAction": {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix"]}}}},
                "window": {"workDoneProgress": False}}
        await s.request("initialize", {"processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": caps,
                                       "initializationOptions": {"cacheDir": str(Path(tmp) / "cache"), "minShare": 0.0,
                                                                         "select": ["BNC"]}})
        loaded = s.expect("msprof-lsp/profileStatus", lambda p: p["state"] in ("loaded", "error", "none"))
        t_load = time.perf_counter()
        s.notify("initialized", {})
        _, status = await asyncio.wait_for(loaded, 600)
        print(f"first load: {time.perf_counter() - t_load:.2f} s ({status['params']['state']}, "
              f"{status['params']['mappedShare']:.1%} mapped)")

        def published(version: int | None, count: int | None = None):  # noqa: ANN202
            def pred(p: dict) -> bool:
                return p["uri"] == uri and p.get("version") == version and (count is None or len(p["diagnostics"]) == count)
            return pred

        # baseline: a request the server answers with an error and no work
        noop = []
        for _ in range(repeat):
            t = time.perf_counter()
            end, _ = await s.request("msprof-lsp/noSuchMethod", {})
            noop.append(end - t)

        opens = []
        version = 0
        for _ in range(max(5, repeat // 4)):
            version += 1
            fut = s.expect("textDocument/publishDiagnostics", published(version, len(pair_lines)))
            t = time.perf_counter()
            s.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version,
                                                               "text": text}})
            end, _ = await asyncio.wait_for(fut, 60)
            opens.append(end - t)
            s.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
            await asyncio.sleep(0.05)

        version += 1
        fut = s.expect("textDocument/publishDiagnostics", published(version, len(pair_lines)))
        s.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version,
                                                           "text": text}})
        _, first = await asyncio.wait_for(fut, 60)
        await asyncio.sleep(0.5)
        changes = []
        inserted = False
        for i in range(repeat):
            version += 1
            # insert / remove a comment line at the top of the first block: every diagnostic moves
            at = pair_lines[0] - 3
            if inserted:
                change = {"range": {"start": {"line": at, "character": 0}, "end": {"line": at + 1, "character": 0}},
                          "text": ""}
            else:
                change = {"range": {"start": {"line": at, "character": 0}, "end": {"line": at, "character": 0}},
                          "text": "        # note\n"}
            inserted = not inserted
            fut = s.expect("textDocument/publishDiagnostics", published(version, len(pair_lines)))
            t = time.perf_counter()
            s.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                "contentChanges": [change]})
            end, msg = await asyncio.wait_for(fut, 60)
            changes.append(end - t)
            if i == repeat - 1:
                first = msg
            await asyncio.sleep(0.06)  # typing speed; re-analysis waits for a 300 ms pause
        await asyncio.sleep(1.0)  # let the re-analysis run once

        diags = first["params"]["diagnostics"]
        actions, hovers = [], []
        for i in range(repeat):
            d = diags[i % len(diags)]
            t = time.perf_counter()
            end, reply = await s.request("textDocument/codeAction", {
                "textDocument": {"uri": uri}, "range": d["range"], "context": {"diagnostics": [d]}})
            actions.append(end - t)
            assert reply.get("result"), reply
            t = time.perf_counter()
            end, _ = await s.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": d["range"]["start"]})
            hovers.append(end - t)
        await asyncio.sleep(1.0)
        idle = rss_mb(proc.pid)

        base = statistics.median(noop)
        print(f"\n{'measure':<38} {'p50 ms':>8} {'p95 ms':>8} {'p50 / no-op':>12}")
        for name, values in (("no-op request (baseline)", noop), ("didOpen -> publishDiagnostics", opens),
                             ("didChange -> publishDiagnostics", changes), ("codeAction", actions),
                             ("hover", hovers)):
            print(f"{name:<38} {pct(values, .5) * 1000:8.2f} {pct(values, .95) * 1000:8.2f} "
                  f"{statistics.median(values) / base:11.1f}x")
        print(f"\nserver RSS when idle: {idle:.0f} MiB ({len(diags)} diagnostics on a {n_lines}-line file)")
        print(f"targets: diagnostics p95 <= 50 ms -> {'met' if max(pct(opens, .95), pct(changes, .95)) <= .05 else 'MISSED'}; "
              f"codeAction p95 <= 20 ms -> {'met' if pct(actions, .95) <= .02 else 'MISSED'}")
        await s.request("shutdown", None)
        s.notify("exit", None)
        await asyncio.wait_for(proc.wait(), 30)
        bare = await bare_server_rss(Path(tmp))
        print(f"server RSS when idle without a profile (the imports): {bare:.0f} MiB")


async def bare_server_rss(tmp: Path) -> float:
    """RSS of a server whose workspace has no profile: what the imports alone cost."""
    empty = tmp / "empty"
    empty.mkdir()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    s = Session(proc)
    await s.request("initialize", {"processId": os.getpid(), "rootUri": empty.as_uri(), "capabilities": {}})
    done = s.expect("msprof-lsp/profileStatus", lambda p: p["state"] in ("loaded", "error", "none"))
    s.notify("initialized", {})
    await asyncio.wait_for(done, 120)
    await asyncio.sleep(1.0)
    rss = rss_mb(proc.pid)
    await s.request("shutdown", None)
    s.notify("exit", None)
    await asyncio.wait_for(proc.wait(), 30)
    return rss


def main() -> None:
    if "--serve" in sys.argv:
        serve()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=158, help="generated modules (19 lines each)")
    ap.add_argument("--repeat", type=int, default=60, help="samples per measure")
    args = ap.parse_args()
    asyncio.run(bench(args.blocks, args.repeat))


if __name__ == "__main__":
    main()
