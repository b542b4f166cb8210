"""Capability patches: validated edits to the capability database (force, forbid, override rates).

A patch is JSON (a file or a dict)::

    {"version": 1,
     "devices": {"cpu": {
        "bandwidth_gbps": 12.0,
        "gemm_half": {"m": 8, "n": 40, "k": 12},
        "kinds":    {"blas": {"rate_gflops": 150, "overhead_us": 5}},
        "variants": {"conv2d/winograd_f2x3": {"rate_gflops": 40}},
        "ops": {"conv2d": {"force": "im2col_gemm",
                           "forbid": ["nchwc_direct"]},
                "matmul": {"force": [{"variant": "small", "dtype": "float32",
                                      "shapes": [[null, 64], [64, null]]}]}}}}}

Why strict: a misspelt key that is silently ignored is a patch that silently does nothing. Every
unknown key, device, kind, op or variant raises ``CapabilityPatchError`` naming the JSON path of
the offending key and what is allowed there. ``force`` takes a variant name or a list of rules
(first match wins; ``shapes`` has one pattern per input, ``null`` matching any size); ``forbid``
lists variants never to pick (the reference cannot be forbidden: it is the last resort). A later
patch replaces what an earlier one said for the same key.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import CapabilityPatchError
from ..ops.registry import REGISTRY
from .capability import DB, KINDS, REFERENCE, SCHEMA_VERSION, ForceRule, devices_with_variants, variant_names
from .variants import VARIANTS

_TOP_KEYS = ("version", "devices")
_DEVICE_KEYS = ("bandwidth_gbps", "gemm_half", "kinds", "variants", "ops")
_GEMM_KEYS = ("m", "n", "k")
_RATE_KEYS = ("rate_gflops", "overhead_us")
_OP_KEYS = ("force", "forbid")
_RULE_KEYS = ("variant", "dtype", "shapes")


def load_capability_patch(patch: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``patch`` (a JSON file path or a dict) and merge it; returns the normalised patch."""
    if isinstance(patch, (str, os.PathLike)):
        path = Path(patch)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CapabilityPatchError("$", f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise CapabilityPatchError("$", f"{path} is not UTF-8 text ({exc.reason})") from None
        try:
            data = json.loads(text)
        # ValueError: bad JSON and integers of more digits than Python converts; RecursionError: nesting
        except (ValueError, RecursionError) as exc:
            raise CapabilityPatchError("$", f"{path} is not valid JSON ({exc})") from None
    else:
        data = patch
    normalised = validate_patch(data)
    DB.apply_patch(normalised)
    return normalised


def validate_patch(data: Any) -> dict[str, Any]:
    """The patch with force rules parsed; raises ``CapabilityPatchError`` on the first problem."""
    _require_mapping(data, "$")
    _check_keys(data, "$", _TOP_KEYS)
    if "version" in data and data["version"] != SCHEMA_VERSION:
        raise CapabilityPatchError("$.version", f"unsupported version {data['version']!r}; this msvm reads "
                                                f"version {SCHEMA_VERSION}")
    devices = data.get("devices", {})
    _require_mapping(devices, "$.devices")
    known = devices_with_variants()
    out: dict[str, Any] = {"devices": {}}
    for device, entry in devices.items():
        path = f"$.devices.{device}"
        if device not in known:
            raise CapabilityPatchError(path, f"unknown device {device!r}; "
                                             f"devices with kernels: {', '.join(known)}")
        out["devices"][device] = _device(entry, path, device)
    return out


def _device(entry: Any, path: str, device: str) -> dict[str, Any]:
    _require_mapping(entry, path)
    _check_keys(entry, path, _DEVICE_KEYS)
    out: dict[str, Any] = {}
    if "bandwidth_gbps" in entry:
        out["bandwidth_gbps"] = _positive(entry["bandwidth_gbps"], f"{path}.bandwidth_gbps")
    if "gemm_half" in entry:
        half = _mapping(entry["gemm_half"], f"{path}.gemm_half")
        _check_keys(half, f"{path}.gemm_half", _GEMM_KEYS)
        out["gemm_half"] = {k: _non_negative(v, f"{path}.gemm_half.{k}") for k, v in half.items()}
    if "kinds" in entry:
        kinds = _mapping(entry["kinds"], f"{path}.kinds")
        known = sorted(set(KINDS) | {v.kind for vs in VARIANTS.values() for v in vs})
        out["kinds"] = {}
        for kind, values in kinds.items():
            if kind not in known:
                raise CapabilityPatchError(f"{path}.kinds.{kind}",
                                           f"unknown kind {kind!r}; kinds: {', '.join(known)}")
            out["kinds"][kind] = _rates(values, f"{path}.kinds.{kind}")
    if "variants" in entry:
        out["variants"] = {}
        for key, values in _mapping(entry["variants"], f"{path}.variants").items():
            where = f"{path}.variants.{key}"
            op, _, name = key.partition("/")
            _check_op(op, where)
            _check_variant(op, name, device, where, f"a key is 'op/variant', e.g. '{op}/{REFERENCE}'")
            out["variants"][key] = _rates(values, where)
    if "ops" in entry:
        out["ops"] = {}
        for op, rules in _mapping(entry["ops"], f"{path}.ops").items():
            where = f"{path}.ops.{op}"
            _check_op(op, where)
            out["ops"][op] = _op_rules(rules, where, op, device)
    return out


def _op_rules(rules: Any, path: str, op: str, device: str) -> dict[str, Any]:
    _require_mapping(rules, path)
    _check_keys(rules, path, _OP_KEYS)
    out: dict[str, Any] = {}
    if "force" in rules:
        force = rules["force"]
        if isinstance(force, str):
            force = [{"variant": force}]
        if not isinstance(force, list):
            raise CapabilityPatchError(f"{path}.force", "must be a variant name or a list of rules "
                                                        "({variant, dtype?, shapes?})")
        out["force"] = [_force_rule(rule, f"{path}.force[{i}]", op, device) for i, rule in enumerate(force)]
    if "forbid" in rules:
        forbid = rules["forbid"]
        if not isinstance(forbid, list) or not all(isinstance(n, str) for n in forbid):
            raise CapabilityPatchError(f"{path}.forbid", "must be a list of variant names")
        for i, name in enumerate(forbid):
            _check_variant(op, name, device, f"{path}.forbid[{i}]")
            if name == REFERENCE:
                raise CapabilityPatchError(f"{path}.forbid[{i}]", "the reference kernel cannot be "
                                           "forbidden (it is the last resort); force a variant instead")
        out["forbid"] = sorted(set(forbid))
    return out


def _force_rule(rule: Any, path: str, op: str, device: str) -> ForceRule:
    _require_mapping(rule, path)
    _check_keys(rule, path, _RULE_KEYS)
    if "variant" not in rule:
        raise CapabilityPatchError(path, "a force rule needs 'variant'")
    variant = rule["variant"]
    _check_variant(op, variant, device, f"{path}.variant")
    dtype = rule.get("dtype")
    if dtype is not None:
        from ..bytecode.opcodes import DTYPES

        if dtype not in DTYPES:
            raise CapabilityPatchError(f"{path}.dtype",
                                       f"unknown dtype {dtype!r}; dtypes: {', '.join(DTYPES)}")
    shapes = rule.get("shapes")
    if shapes is not None:
        if not (isinstance(shapes, list) and all(isinstance(p, list) and all(map(_size_pattern, p))
                                                  for p in shapes)):
            raise CapabilityPatchError(f"{path}.shapes", "must be a list with one pattern per input, each a "
                                                         "list of sizes (int >= 0, or null for any size)")
        shapes = tuple(tuple(p) for p in shapes)
    return ForceRule(variant, dtype, shapes)


def _size_pattern(d: Any) -> bool:
    return d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 0)


def _rates(values: Any, path: str) -> dict[str, float]:
    _require_mapping(values, path)
    _check_keys(values, path, _RATE_KEYS)
    out = {}
    for key, value in values.items():
        out[key] = (_positive if key == "rate_gflops" else _non_negative)(value, f"{path}.{key}")
    return out


def _check_op(op: str, path: str) -> None:
    if op not in REGISTRY:
        import difflib

        close = difflib.get_close_matches(op, REGISTRY, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CapabilityPatchError(path, f"unknown op {op!r}{hint}")


def _check_variant(op: str, name: Any, device: str, path: str, hint: str = "") -> None:
    names = variant_names(op, device)
    if name not in names:
        allowed = ", ".join(names) or "none"
        raise CapabilityPatchError(path, f"no variant {name!r} of {op} on {device}; variants: {allowed}"
                                         + (f" ({hint})" if hint else ""))


def _check_keys(data: Mapping[str, Any], path: str, allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            raise CapabilityPatchError(f"{path}.{key}",
                                       f"unknown key {key!r}; allowed here: {', '.join(allowed)}")


def _require_mapping(value: Any, path: str) -> None:
    if not isinstance(value, Mapping):
        raise CapabilityPatchError(path, f"must be an object, got {type(value).__name__}")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    _require_mapping(value, path)
    return value


def _positive(value: Any, path: str) -> float:
    return _number(value, path, "> 0", lambda x: x > 0)


def _non_negative(value: Any, path: str) -> float:
    return _number(value, path, ">= 0", lambda x: x >= 0)


def _number(value: Any, path: str, wanted: str, ok: Callable[[float], bool]) -> float:
    """``value`` as a finite float satisfying ``ok``: JSON reads 1e999 as inf, and a long integer
    does not fit a float."""
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            value = f"an integer of {value.bit_length()} bits"
    if number is None or not math.isfinite(number) or not ok(number):
        raise CapabilityPatchError(path, f"must be a number {wanted}, and finite, got {value!r}")
    return number
