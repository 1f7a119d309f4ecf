"""A device model that times kernels from their shapes: the truth of the savings cases whose fix
changes how long kernels take (docs/savings.md "How good are the estimates").

A fix such as padding a GEMM, bf16 autocast or a fused kernel changes kernel times, and a truth
that took those times from a knob would restate the rule's own assumption. Here the generator
times every kernel with shapes -- before and after the fix alike -- from a roofline of one device,
and the rules never read it: they see only the recorded durations, as on a real profile.

* A cube kernel (MatMul / BatchMatMul) takes ``kernel_ns`` plus the longer of its compute and its
  memory time. Compute: the output in ``tile`` x ``tile`` tiles spread over ``cores`` (a partial
  tile costs a whole one, so small GEMMs reach a lower rate), each tile 2·tile²·K FLOPs (K rounded
  up to 16) at the core's share of the peak -- ``cube_flop_per_ns`` for bf16/fp16, times
  ``fp32_share`` for fp32. Memory: every input and the output read or written once at
  ``hbm_bytes_per_ns``.
* Any other kernel with shapes (vector work) takes ``kernel_ns`` plus its inputs and outputs
  moved at ``hbm_bytes_per_ns``.
* A cube kernel's tensor whose rows (last dim x element size) are not a multiple of
  ``burst_bytes`` moves in split bursts at ``split_burst_share`` of the bandwidth (the 64-byte
  alignment the tuning guide asks of a MatMul's inner axis): the cube reads 2-D tiles, one burst
  run per row. A vector kernel streams its contiguous tensors whole, whatever their rows.

The constants are an Ascend 910B-class device (about 280 TFLOP/s bf16 over 20 cube cores, 1.6 TB/s
of HBM); the cases depend on the shape of the model (size-dependent rates, memory-bound GEMMs,
alignment), not on its exact figures. Shapes are parsed here from the generator's own strings,
not with the product's parser.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from .run import KernelSpec

CUBE = re.compile(r"MatMul", re.I)
BYTES = {"DT_FLOAT": 4, "FLOAT": 4, "DT_BF16": 2, "FLOAT16": 2, "DT_FLOAT16": 2, "DT_UINT8": 1, "INT64": 8,
         "DT_INT64": 8, "DT_INT32": 4, "INT32": 4, "DT_BOOL": 1, "BOOL": 1, "DT_DOUBLE": 8}
HALF = frozenset({"DT_BF16", "FLOAT16", "DT_FLOAT16"})


def _shapes(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(d) for d in s.split(",") if d) for s in text.split(";")] if text else []


def _types(text: str, n: int) -> list[str]:
    types = text.split(";") if text else []
    return (types + ["DT_BF16"] * n)[:n]


@dataclass(frozen=True)
class DeviceModel:
    cube_flop_per_ns: float = 280_000.0  # bf16/fp16 cube peak over all cores (280 TFLOP/s)
    fp32_share: float = 0.25  # the cube's fp32 rate / its bf16 rate
    cores: int = 20
    tile: int = 128
    hbm_bytes_per_ns: float = 1600.0  # 1.6 TB/s
    burst_bytes: int = 64
    split_burst_share: float = 0.5
    kernel_ns: int = 2000  # a kernel's fixed start and drain

    def _move_ns(self, shapes: list[tuple[int, ...]], types: list[str], tiled: bool) -> float:
        ns = 0.0
        for s, t in zip(shapes, types):
            size = BYTES.get(t.strip().upper(), 2)
            rate = self.hbm_bytes_per_ns
            if tiled and s and (s[-1] * size) % self.burst_bytes:
                rate *= self.split_burst_share
            ns += math.prod(s) * size / rate if s else 0.0
        return ns

    def _compute_ns(self, ins: list[tuple[int, ...]], out: tuple[int, ...], types: list[str]) -> float:
        a = ins[0]
        m, k, n = a[-2], a[-1], out[-1]
        batch = math.prod(out[:-2]) if len(out) > 2 else 1
        tiles = batch * math.ceil(m / self.tile) * math.ceil(n / self.tile)
        waves = math.ceil(tiles / self.cores)
        rate = self.cube_flop_per_ns / self.cores
        if not all(t.strip().upper() in HALF for t in types[:2]):
            rate *= self.fp32_share
        return waves * 2 * self.tile * self.tile * (math.ceil(k / 16) * 16) / rate

    def kernel_dur_ns(self, k: KernelSpec) -> int | None:
        """The kernel's time on this device; None where it has no shapes (its time stays)."""
        ins, outs = _shapes(k.input_shapes), _shapes(k.output_shapes)
        if not ins or not outs or k.is_comm or not k.is_op:
            return None
        in_t, out_t = _types(k.input_dtypes, len(ins)), _types(k.output_dtypes, len(outs))
        cube = bool(CUBE.search(k.type)) and len(ins[0]) >= 2 and bool(outs[0])
        move = self._move_ns(ins, in_t, cube) + self._move_ns(outs, out_t, cube)
        work = 0.0
        if cube:
            work = self._compute_ns(ins, outs[0], in_t)
        return round(self.kernel_ns + max(move, work))

    def timed(self, k: KernelSpec) -> KernelSpec:
        ns = self.kernel_dur_ns(k)
        return k if ns is None else replace(k, dur_ns=ns)


DEVICE = DeviceModel()
