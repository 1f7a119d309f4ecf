"""Readers for the small JSON files of Ascend profiles.

profiler_info*.json and profiler_metadata.json fill ProfileMeta; communication.json gives CommOps
(durations ms -> ns, start µs -> ns, exactly: numbers are decoded as Decimal, never float);
communication_matrix.json is kept as a dict; msprof's info.json gives the core counts.

Malformed JSON -> ProfileError with the file, line and column; a wrong top-level shape ->
ProfileError; odd values inside -> an Issue and the value skipped.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.numbers import fit_int64_in_place, float_of, int64_of, shown
from msprof_lsp.mapping.profile.model import CommOp, ProfileMeta
from msprof_lsp.mapping.units import INT64_MAX, INT64_MIN, us_text_to_ns

_RANK_FILE_RE = re.compile(r"^profiler_info_(\d+)\.json$")
_STEP_KEY_RE = re.compile(r"^step(\d*)$", re.IGNORECASE)
_P2P_PREFIXES = ("hcom_send", "hcom_receive", "hcom_batchsendrecv")


def load_json(path: Path, issues: list[Issue] | None = None, *, exact: bool = False) -> Any:
    """Decode one JSON file: UTF-8 (BOM or not), else GB18030 with an Issue.

    ``exact``: numbers with a fraction or exponent come back as Decimal (for exact ns).
    Raises ProfileError for a missing/empty/binary file or invalid JSON (with line and column).
    """
    path = Path(path)
    raw = safe_io.read_bytes(path)
    if not raw or raw.isspace():
        raise ProfileError(path, "empty file")
    if b"\x00" in raw:
        raise ProfileError(path, "binary content (NUL bytes): not a JSON text file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        try:
            text = raw.decode("gb18030")
        except UnicodeDecodeError:
            raise ProfileError(path, "not UTF-8 or GB18030 text") from None
        if issues is not None:
            issues.append(Issue(str(path), "not valid UTF-8; decoded as GB18030"))
    if text.startswith("\ufeff"):
        text = text[1:]
    safe_io.check_json(path, raw)
    try:
        return json.loads(text, parse_float=_exact_number if exact else float)
    except json.JSONDecodeError as exc:
        raise ProfileError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise ProfileError(path, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise safe_io.too_deep(path) from None


def _exact_number(text: str) -> Decimal:
    """A JSON number with a fraction or exponent, exactly. An exponent past the decimal context's
    range (``1.5e99999999999999999999``) is valid JSON that Decimal refuses: it becomes an infinity,
    which the time readers skip as "not finite" with a notice."""
    try:
        return Decimal(text)
    except InvalidOperation:
        return Decimal("-Infinity" if text.startswith("-") else "Infinity")


def _object(path: Path, value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProfileError(path, f"expected a JSON object at the top of {what}, found {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------------------------
# profiler_info.json / profiler_info_{rank}.json

_COMMON_BOOLS = ("with_stack", "record_shapes", "profile_memory", "with_modules")


def read_profiler_info(path: Path, meta: ProfileMeta) -> list[Issue]:
    """Fill ``meta`` from profiler_info*.json: capture flags, level, AI Core metrics, GC
    threshold, export type, versions, rank (``rank_id`` string or int, else the file-name
    suffix), ``end_info.collectionTimeEnd``; everything else goes to ``meta.extra``."""
    path = Path(path)
    issues: list[Issue] = []
    info = _object(path, load_json(path, issues), "profiler_info.json")
    where = str(path)
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    _read_common_config(config, meta, issues, where)
    _read_experimental_config(config, meta, issues, where)
    for key in ("torch_npu_version", "cann_version"):
        value = info.get(key)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            setattr(meta, key, str(value))
    _read_rank(info, path, meta, issues)
    _read_end_info(info, meta, issues, where)
    for key, value in info.items():
        if key not in ("config", "torch_npu_version", "cann_version", "rank_id", "end_info"):
            meta.extra[key] = value  # start_info, ...
    for key, value in config.items():
        if key not in ("common_config", "experimental_config"):
            meta.extra[key] = value
    meta.files.append(where)
    return issues


def _read_common_config(config: dict[str, Any], meta: ProfileMeta, issues: list[Issue], where: str) -> None:
    """``config.common_config``: the capture flags; the rest (activities, schedule, ...) as is."""
    common = config.get("common_config") if isinstance(config.get("common_config"), dict) else {}
    for key in _COMMON_BOOLS:
        if key in common:
            value = common[key]
            if isinstance(value, bool):
                setattr(meta, key, value)
            else:
                issues.append(Issue(where, f"config.common_config.{key} is {value!r}, not true/false"))
    for key, value in common.items():
        if key not in _COMMON_BOOLS:
            meta.extra[key] = value  # activities, schedule, with_flops, ...


def _read_experimental_config(config: dict[str, Any], meta: ProfileMeta, issues: list[Issue], where: str) -> None:
    """``config.experimental_config``: level, AI Core metrics, GC threshold, export type; the rest
    (l2_cache, msprof_tx, ...) without the leading ``_``."""
    exp = config.get("experimental_config")
    exp = exp if isinstance(exp, dict) else {}
    level = exp.get("_profiler_level")
    if isinstance(level, str):
        meta.level = level
    metrics = exp.get("_aic_metrics")
    if isinstance(metrics, str):
        meta.aic_metrics = metrics
    if "_gc_detect_threshold" in exp:
        gc = exp["_gc_detect_threshold"]
        if gc is None:
            meta.gc_detect_threshold = None
        elif isinstance(gc, (int, float)) and (value := float_of(gc)) is not None:
            meta.gc_detect_threshold = value
        else:  # text, a bool, NaN, or an int past float range (10**400): skipped with a notice
            issues.append(Issue(where, f"_gc_detect_threshold is {shown(gc)}, not a finite number"))
    export = exp.get("_export_type")
    if isinstance(export, str):
        meta.export_type = (export,)
    elif isinstance(export, list):
        meta.export_type = tuple(str(e) for e in export)
    known_exp = {"_profiler_level", "_aic_metrics", "_gc_detect_threshold", "_export_type"}
    for key, value in exp.items():
        if key not in known_exp:
            meta.extra[key.lstrip("_")] = value  # l2_cache, msprof_tx, data_simplification, ...


def _read_rank(info: dict[str, Any], path: Path, meta: ProfileMeta, issues: list[Issue]) -> None:
    """``rank_id`` (string or int), else the file name's ``profiler_info_{rank}``; both said
    when they disagree."""
    where = str(path)
    rank = _rank_of(info.get("rank_id"))
    if "rank_id" in info and rank is None and info.get("rank_id") not in (-1, "-1", None, ""):
        issues.append(Issue(where, f"rank_id {shown(info.get('rank_id'))} is not an integer in int64 range; "
                                   "ignored"))
    m = _RANK_FILE_RE.match(path.name)
    file_rank = _rank_of(m.group(1)) if m else None
    if rank is None:
        rank = file_rank
    elif file_rank is not None and file_rank != rank:
        issues.append(Issue(where, f"rank_id {rank} differs from the file name's rank {file_rank}"))
    if rank is not None:
        meta.rank = rank


def _read_end_info(info: dict[str, Any], meta: ProfileMeta, issues: list[Issue], where: str) -> None:
    """``end_info.collectionTimeEnd`` (epoch ns); the other keys to ``meta.extra["end_info"]``."""
    end = info.get("end_info")
    if not (isinstance(end, dict) and "collectionTimeEnd" in end):
        return
    ns = _int(end["collectionTimeEnd"])
    if ns is None:
        issues.append(Issue(where, f"end_info.collectionTimeEnd {shown(end['collectionTimeEnd'])} is not an "
                                   "integer in int64 range; ignored"))
    else:
        meta.collection_end_ns = ns
    rest = {k: v for k, v in end.items() if k != "collectionTimeEnd"}
    if rest:
        meta.extra["end_info"] = rest


def _int(value: Any) -> int | None:
    """An int64 from JSON (int, digit text, integral float); "²", 400 digits, 2**64 are None."""
    return int64_of(value)


def _rank_of(value: Any) -> int | None:
    rank = _int(value)
    return rank if rank is not None and rank >= 0 else None


# ---------------------------------------------------------------------------------------------
# profiler_metadata.json


def read_env_variables(env: object, meta: ProfileMeta, where: str, source: str) -> list[Issue]:
    """An ENV_VARIABLES object (profiler_metadata.json's, or the DB's META_DATA row, whose value is
    the same object as JSON text) -> ``meta.env`` ("" = unset; a null value is unset too) and
    ``meta.env_source`` = ``source``. Anything else is one Issue; ``None`` (absent) is nothing."""
    if env is None:
        return []
    if isinstance(env, str):
        try:
            env = json.loads(env)
        except ValueError:
            return [Issue(where, "ENV_VARIABLES is not JSON; ignored")]
    if not isinstance(env, dict):
        return [Issue(where, "ENV_VARIABLES is not an object; ignored")]
    for key, value in env.items():
        meta.env[str(key)] = "" if value is None else str(value)
    meta.env_source = source
    return []


def read_profiler_metadata(path: Path, meta: ProfileMeta) -> list[Issue]:
    """ENV_VARIABLES -> ``meta.env`` ("" = unset, kept as ""), parallel_group_info ->
    ``meta.parallel_groups``, every other (user ``add_metadata``) key -> ``meta.extra``."""
    path = Path(path)
    issues: list[Issue] = []
    data = _object(path, load_json(path, issues), "profiler_metadata.json")
    where = str(path)
    issues.extend(read_env_variables(data.get("ENV_VARIABLES"), meta, where, "profiler_metadata.json ENV_VARIABLES"))
    groups = data.get("parallel_group_info")
    if isinstance(groups, dict):
        meta.parallel_groups.update(groups)
    elif groups is not None:
        issues.append(Issue(where, "parallel_group_info is not an object; ignored"))
    for key, value in data.items():
        if key not in ("ENV_VARIABLES", "parallel_group_info"):
            meta.extra[key] = value
    meta.files.append(where)
    return issues


# ---------------------------------------------------------------------------------------------
# communication.json and msprof-analyze's cluster_communication.json

_TIME = "Communication Time Info"
_BANDWIDTH = "Communication Bandwidth Info"


def read_communication(path: Path) -> tuple[list[CommOp], list[Issue]]:
    """communication.json -> CommOps (collective and p2p; ``Total Op Info`` is a sum, skipped).

    Step keys ``step<N>`` give step N, a bare ``step`` gives -1. Times: ``Start Timestamp(us)``
    µs -> ns, the ``(ms)`` durations ms -> ns, exactly (Decimal, half-up). The bandwidth dict per
    link type is kept as in the file (floats).

    msprof-analyze's cluster_communication.json (``"(0, 1)"`` rank group -> ``step`` ->
    ``<op>@<group>`` -> ``<rank>`` -> the two info objects) is accepted too: each op appears once
    per rank, with ``CommOp.rank`` set (it is -1 for a single-rank communication.json).
    """
    path = Path(path)
    issues: list[Issue] = []
    data = _object(path, load_json(path, issues, exact=True), "communication.json")
    where = str(path)
    ops: list[CommOp] = []
    for top_key, top in data.items():
        if not isinstance(top, dict):
            issues.append(Issue(where, f"{top_key!r} is not an object; skipped"))
            continue
        if _STEP_KEY_RE.match(top_key):
            _read_step(top_key, top, None, ops, issues, where)
        else:  # cluster layout: rank group -> step keys
            for step_key, step in top.items():
                if isinstance(step, dict) and _STEP_KEY_RE.match(step_key):
                    _read_step(step_key, step, top_key, ops, issues, where)
                else:
                    issues.append(Issue(where, f"unexpected key {top_key!r}/{step_key!r}; skipped"))
    return ops, issues


def _read_step(
    step_key: str,
    step: dict[str, Any],
    cluster_group: str | None,
    ops: list[CommOp],
    issues: list[Issue],
    where: str,
) -> None:
    digits = _STEP_KEY_RE.match(step_key).group(1)  # type: ignore[union-attr]
    step_no = int64_of(digits) if digits else -1
    if step_no is None:  # "step" + 30 digits: no step number the model can hold
        issues.append(Issue(where, f"step key {shown(step_key)} is beyond int64; skipped"))
        return
    if cluster_group is not None:
        # cluster layout: the op dicts sit right under the step, keyed by rank inside
        for op_key, per_rank in step.items():
            if not isinstance(per_rank, dict):
                continue
            kind = "p2p" if op_key.startswith(_P2P_PREFIXES) else "collective"
            for rank_key, info in per_rank.items():
                rank = _int(rank_key)
                if rank is None or not isinstance(info, dict):
                    issues.append(Issue(where, f"{cluster_group}/{step_key}/{op_key}: rank key {rank_key!r} skipped"))
                    continue
                op = _comm_op(op_key, info, step_no, kind, rank, issues, where)
                if op is not None:
                    ops.append(op)
        return
    for kind in ("collective", "p2p"):
        group = step.get(kind)
        if group is None:
            continue
        if not isinstance(group, dict):
            issues.append(Issue(where, f"{step_key}/{kind} is not an object; skipped"))
            continue
        for op_key, info in group.items():
            if op_key == "Total Op Info":
                continue
            if not isinstance(info, dict):
                issues.append(Issue(where, f"{step_key}/{kind}/{op_key} is not an object; skipped"))
                continue
            op = _comm_op(op_key, info, step_no, kind, -1, issues, where)
            if op is not None:
                ops.append(op)


def _comm_op(
    op_key: str, info: dict[str, Any], step: int, kind: str, rank: int, issues: list[Issue], where: str
) -> CommOp | None:
    times = info.get(_TIME)
    if not isinstance(times, dict):
        issues.append(Issue(where, f"{op_key}: no {_TIME!r}; skipped"))
        return None
    name, _, group = op_key.partition("@")
    try:
        start = _us_ns(times.get("Start Timestamp(us)"))
        elapse, transit, wait, sync, idle = (
            _ms_ns(times.get(k))
            for k in ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)",
                      "Synchronization Time(ms)", "Idle Time(ms)")
        )
    except (ValueError, InvalidOperation) as exc:
        issues.append(Issue(where, f"{op_key}: {exc}; skipped"))
        return None
    bandwidth = info.get(_BANDWIDTH)
    links = _plain(bandwidth) if isinstance(bandwidth, dict) else {}
    return CommOp(
        name=name,
        group=group,
        step=step,
        kind=kind,
        start_ns=start,
        elapse_ns=elapse,
        transit_ns=transit,
        wait_ns=wait,
        sync_ns=sync,
        idle_ns=idle,
        bandwidth=links,
        rank=rank,
    )


def _us_ns(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, (int, Decimal, str)):
        raise ValueError(f"time {value!r} is not a number")
    return us_text_to_ns(str(value)) if not isinstance(value, int) else _in_int64(value * 1000, value)


def _ms_ns(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, (int, Decimal, str)):
        raise ValueError(f"duration {value!r} is not a number")
    try:
        ns = Decimal(value) * 1_000_000
    except ArithmeticError:  # decimal.Overflow: an exponent near the context's limit, times 1e6
        raise ValueError(f"duration {shown(value)} is out of range") from None
    if not ns.is_finite():
        raise ValueError(f"duration {value!r} is not finite")
    return _in_int64(int(ns.quantize(Decimal(1), rounding=ROUND_HALF_UP)), value)


def _in_int64(ns: int, value: Any) -> int:
    """``ns`` when it fits the model's int64 columns; else the op is skipped with a notice."""
    if not INT64_MIN <= ns <= INT64_MAX:
        raise ValueError(f"time {shown(value)} is out of range")
    return ns


def _plain(value: Any) -> Any:
    """Decimals back to floats, recursively (the bandwidth figures are ratios and sizes)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        return float_of(value)  # 2**64 bytes is a size, not an int64 column: float (None past 1e308)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# communication_matrix.json


def read_communication_matrix(path: Path) -> tuple[dict[str, Any], list[Issue]]:
    """communication_matrix.json as a dict (``step`` -> ``collective``/``p2p`` ->
    ``<type>-<stat>@<group>`` -> ``"<src>-<dst>"`` -> link figures). Steps that are not
    objects are dropped with an Issue."""
    path = Path(path)
    issues: list[Issue] = []
    data = _object(path, load_json(path, issues), "communication_matrix.json")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out[key] = value
        else:
            issues.append(Issue(str(path), f"{key!r} is not an object; skipped"))
    # A Transit Size of 2**64 is a (absurd) size, not an int64: kept as a float (None past
    # 1e308), said once, so the rank still goes through the workers' codec and the summary.
    big = fit_int64_in_place(out, float_of)
    if big:
        issues.append(Issue(str(path), f"{big} integer value(s) beyond int64 read as floats"))
    return out, issues


# ---------------------------------------------------------------------------------------------
# msprof info.json


@dataclass(frozen=True, slots=True)
class MsprofInfo:
    """Device facts from a PROF_* ``info.json``: core counts and clock (MHz)."""

    ai_core_num: int | None = None
    aiv_num: int | None = None
    aic_frequency_mhz: float | None = None
    aiv_frequency_mhz: float | None = None
    device_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other top-level keys
    issues: list[Issue] = field(default_factory=list)


def read_msprof_info(path: Path) -> MsprofInfo:
    """PROF_*/host/info.json (or device_{id}/info.json.{id}) -> MsprofInfo.

    The figures are read from the top level or, as CANN writes them, from the first
    ``DeviceInfo`` entry (``ai_core_num``, ``aiv_num``, ``aic_frequency`` -- often a string).
    """
    path = Path(path)
    issues: list[Issue] = []
    data = _object(path, load_json(path, issues), "info.json")
    device: dict[str, Any] = {}
    devices = data.get("DeviceInfo")
    if isinstance(devices, list) and devices and isinstance(devices[0], dict):
        device = devices[0]

    def pick(key: str) -> Any:
        return data[key] if key in data else device.get(key)

    def number(key: str, kind: type) -> Any:
        value = pick(key)
        if value is None or value == "":
            return None
        f = float_of(value)  # "²", NaN, 1e999 and 400 digits are no number
        result = f if kind is float or f is None else int64_of(math.trunc(f))
        if result is None:
            issues.append(Issue(str(path), f"{key} {shown(value)} is not a number in range; ignored"))
        return result

    dev_id = _int(device.get("id")) if device else None
    if dev_id is None:
        dev_id = _int(data.get("devices"))
    info = MsprofInfo(
        ai_core_num=number("ai_core_num", int),
        aiv_num=number("aiv_num", int),
        aic_frequency_mhz=number("aic_frequency", float),
        aiv_frequency_mhz=number("aiv_frequency", float),
        device_id=dev_id,
        extra={k: v for k, v in data.items() if k not in ("DeviceInfo",)},
        issues=issues,
    )
    return info


__all__ = [
    "MsprofInfo",
    "load_json",
    "read_communication",
    "read_communication_matrix",
    "read_msprof_info",
    "read_profiler_info",
    "read_profiler_metadata",
]
