"""Just enough Kubernetes protobuf decoding for the requests kubectl sends as protobuf.

kubectl's typed clients send some bodies as ``application/vnd.kubernetes.protobuf`` (the
``k8s\\0`` magic followed by a ``runtime.Unknown`` envelope: 1 typeMeta, 2 raw, 3
contentEncoding, 4 contentType): ``kubectl certificate approve|deny`` PUTs a whole
CertificateSigningRequest to ``/approval``, and ``kubectl drain`` without eviction DELETEs with
protobuf DeleteOptions.  A general decoder would need every generated.proto; instead we decode
the wire format generically and map the few field numbers those two messages need (taken from
upstream's ``generated.proto`` files).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

Fields = list[tuple[int, int, Any]]


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = val = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        val |= (b & 0x7F) << shift
        if not b & 0x80:
            return val, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(buf: bytes) -> Fields:
    out: Fields = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(buf, i)
            out.append((num, wt, val))
        elif wt == 2:
            ln, i = _varint(buf, i)
            if i + ln > len(buf):
                raise ValueError("truncated field")
            out.append((num, wt, buf[i:i + ln]))
            i += ln
        elif wt == 1:
            out.append((num, wt, buf[i:i + 8]))
            i += 8
        elif wt == 5:
            out.append((num, wt, buf[i:i + 4]))
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
    return out


def _first(fs: Fields, num: int) -> Any:
    return next((v for n, _wt, v in fs if n == num), None)


def _str(fs: Fields, num: int) -> str | None:
    v = _first(fs, num)
    return v.decode() if isinstance(v, bytes | bytearray) else None


def _int(v: int) -> int:
    return v - 2**64 if v >= 2**63 else v


def unwrap(raw: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw object bytes) from a ``k8s\\0`` runtime.Unknown envelope."""
    if not raw.startswith(b"k8s\x00"):
        raise ValueError("missing protobuf magic")
    env = fields(raw[4:])
    tm = fields(_first(env, 1) or b"")
    return _str(tm, 1) or "", _str(tm, 2) or "", _first(env, 2) or b""


def _time(buf: bytes | None) -> str | None:
    if not buf:
        return None
    secs = _first(fields(buf), 1) or 0
    return dt.datetime.fromtimestamp(_int(secs), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _object_meta(buf: bytes) -> dict[str, Any]:
    fs = fields(buf)
    meta: dict[str, Any] = {}
    for num, key in ((1, "name"), (2, "generateName"), (3, "namespace"), (5, "uid"), (6, "resourceVersion")):
        v = _str(fs, num)
        if v:
            meta[key] = v
    return meta


def delete_options(raw: bytes) -> dict[str, Any]:
    """DeleteOptions: 1 gracePeriodSeconds, 2 preconditions{1 uid, 2 resourceVersion}, 3 orphanDependents,
    4 propagationPolicy, 5 dryRun."""
    try:
        _av, _k, body = unwrap(raw) if raw.startswith(b"k8s\x00") else ("", "", raw)
        opts: dict[str, Any] = {}
        for n, wt, v in fields(body):
            if n == 1 and wt == 0:
                opts["gracePeriodSeconds"] = _int(v)
            elif n == 2 and wt == 2:
                pre = fields(v)
                p: dict[str, str] = {}
                if _str(pre, 1):
                    p["uid"] = _str(pre, 1) or ""
                if _str(pre, 2):
                    p["resourceVersion"] = _str(pre, 2) or ""
                opts["preconditions"] = p
            elif n == 4 and wt == 2:
                opts["propagationPolicy"] = v.decode()
            elif n == 5 and wt == 2:
                opts.setdefault("dryRun", []).append(v.decode())
        return opts
    except (ValueError, UnicodeDecodeError):
        return {}


def certificate_signing_request(raw: bytes) -> dict[str, Any]:
    """CertificateSigningRequest: 1 metadata, 2 spec, 3 status{1 conditions, 2 certificate};
    condition: 1 type, 6 status, 2 reason, 3 message, 4 lastUpdateTime, 5 lastTransitionTime."""
    av, kind, body = unwrap(raw)
    fs = fields(body)
    obj: dict[str, Any] = {"apiVersion": av or "certificates.k8s.io/v1", "kind": kind or "CertificateSigningRequest",
                           "metadata": _object_meta(_first(fs, 1) or b"")}
    st = fields(_first(fs, 3) or b"")
    conds = []
    for n, _wt, v in st:
        if n != 1:
            continue
        cf = fields(v)
        c: dict[str, Any] = {"type": _str(cf, 1) or "", "status": _str(cf, 6) or "True"}
        for num, key in ((2, "reason"), (3, "message")):
            s = _str(cf, num)
            if s:
                c[key] = s
        for num, key in ((4, "lastUpdateTime"), (5, "lastTransitionTime")):
            t = _time(_first(cf, num))
            if t:
                c[key] = t
        conds.append(c)
    obj["status"] = {"conditions": conds}
    return obj


DECODERS = {"CertificateSigningRequest": certificate_signing_request}


def decode_object(raw: bytes) -> dict[str, Any]:
    """Decode a supported protobuf object; ValueError for anything else."""
    _av, kind, _body = unwrap(raw)
    dec = DECODERS.get(kind)
    if dec is None:
        raise ValueError(f"protobuf decoding of {kind or 'this object'} is not supported")
    return dec(raw)
