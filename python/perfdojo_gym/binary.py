"""The bridge's binary frames (docs/bridge.md, "Binary frames"): step or reset many sessions in
one round trip; observations arrive as raw little-endian arrays and masks as bitsets."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MAGIC = 0xB5
VERSION = 1
STEP, RESET_SEED, RESET = 1, 2, 3

_HEAD = struct.Struct("<BBHI")
_ENTRY = struct.Struct("<QQI")
_RECORD = struct.Struct("<BBBBIddddI")  # status .. observation byte count
_U32 = struct.Struct("<I")


def encode(request_id: int, entries: Sequence[tuple[int, int, int]]) -> bytes:
    """(session, value, kind) entries: kind STEP (value = action), RESET_SEED, RESET."""
    out = bytearray(_HEAD.pack(MAGIC, VERSION, len(entries), request_id & 0xFFFFFFFF))
    for session, value, kind in entries:
        out += _ENTRY.pack(session, value, kind)
    return bytes(out)


@dataclass
class Batch:
    """A reply's records as arrays over the entries (what a vector env wants): ok, terminated,
    truncated, illegal_action, action_had_no_effect, step, reward, time_s, initial_time_s,
    best_time_s; observation (entries x observation bytes, uint8: view it as the spaces' dtypes);
    mask (entries x n, int8); message (list of str; "type: message" for a failed entry)."""
    ok: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    illegal_action: np.ndarray
    action_had_no_effect: np.ndarray
    step: np.ndarray
    reward: np.ndarray
    time_s: np.ndarray
    initial_time_s: np.ndarray
    best_time_s: np.ndarray
    observation: np.ndarray
    mask: np.ndarray
    message: list


def _layout(n_actions: int, obs_bytes: int):
    """The record of an entry that succeeded, as a numpy structured dtype, and a Struct that
    reads its status and its three byte counts (observation, mask, message); cached per
    shape."""
    key = (n_actions, obs_bytes)
    found = _LAYOUTS.get(key)
    if found is None:
        mb = (n_actions + 7) // 8
        size = _RECORD.size + obs_bytes + 4 + mb + 4
        dtype = np.dtype({"names": ["head", "step", "reals", "obs", "mask"],
                          "formats": [("u1", 4), "<u4", ("<f8", 4), ("u1", obs_bytes), ("u1", mb)],
                          "offsets": [0, 4, 8, _RECORD.size, _RECORD.size + obs_bytes + 4],
                          "itemsize": size})
        counts = struct.Struct(f"<B{_RECORD.size - 5}xI{obs_bytes}xI{mb}xI")
        found = _LAYOUTS[key] = (dtype, counts)
    return found


_LAYOUTS: dict = {}
# What a record's head byte v says, by column: v == 0 (status: ok), v != 0 (terminated,
# truncated), bit 0 and bit 1 (flags: illegal_action, action_had_no_effect). Indexing it with
# the heads answers all five in one numpy call.
_HEAD_BITS = np.array([[v == 0, v != 0, v & 1 != 0, v & 2 != 0] for v in range(256)], dtype=bool)


def _decode_uniform(body: bytearray, count: int, rid: int, n_actions: int, obs_bytes: int):
    """The common reply: every entry succeeded and carries its whole observation and mask, so
    the records have one size and one numpy view reads them all (a copy per field, not per
    record). None when the reply is not of that kind."""
    dtype, counts = _layout(n_actions, obs_bytes)
    if len(body) != _HEAD.size + count * dtype.itemsize:
        return None
    expect = (0, obs_bytes, (n_actions + 7) // 8, 0)  # whole observation and mask, no message
    for i in range(count):
        if counts.unpack_from(body, _HEAD.size + i * dtype.itemsize) != expect:
            return None
    rec = np.frombuffer(body, dtype=dtype, count=count, offset=_HEAD.size)
    bits = _HEAD_BITS.take(rec["head"], axis=0)  # entry x head byte x column
    # Numeric fields are copied out contiguous: a record's stride need not be a multiple of their
    # element size, and torch.as_tensor (SB3, CleanRL) refuses such views.
    reals = np.ascontiguousarray(rec["reals"].T)
    return rid, Batch(ok=bits[:, 0, 0], terminated=bits[:, 1, 1], truncated=bits[:, 2, 1],
                      illegal_action=bits[:, 3, 2], action_had_no_effect=bits[:, 3, 3],
                      step=rec["step"].astype(np.int32), reward=reals[0], time_s=reals[1],
                      initial_time_s=reals[2], best_time_s=reals[3],
                      observation=np.ascontiguousarray(rec["obs"]),
                      mask=np.unpackbits(rec["mask"], axis=1, count=n_actions).view(np.int8),
                      message=[""] * count)


def decode_batch(body: bytes, n_actions: int, obs_bytes: int) -> tuple[int, Batch]:
    """The reply's id and its records as arrays; every entry has `n_actions` actions and
    `obs_bytes` bytes of observation (failed entries carry none)."""
    magic, version, count, rid = _HEAD.unpack_from(body, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a binary reply (magic {magic:#x}, version {version})")
    if count:
        if not isinstance(body, bytearray):
            body = bytearray(body)
        fast = _decode_uniform(body, count, rid, n_actions, obs_bytes)
        if fast is not None:
            return fast
    heads = []
    obs = bytearray(count * obs_bytes)
    mask_bytes = (n_actions + 7) // 8
    masks = bytearray(count * mask_bytes)
    messages = []
    pos, unpack, u32 = _HEAD.size, _RECORD.unpack_from, _U32.unpack_from
    for i in range(count):
        head = unpack(body, pos)
        heads.append(head)
        pos += _RECORD.size
        n = head[9]
        if n:
            if n != obs_bytes:
                raise ValueError(f"record {i}: {n} observation bytes, expected {obs_bytes}")
            obs[i * obs_bytes:(i + 1) * obs_bytes] = body[pos:pos + n]
        pos += n
        (n,) = u32(body, pos)
        pos += 4
        if n:
            if n != mask_bytes:
                raise ValueError(f"record {i}: {n} mask bytes, expected {mask_bytes}")
            masks[i * mask_bytes:(i + 1) * mask_bytes] = body[pos:pos + n]
        pos += n
        (n,) = u32(body, pos)
        pos += 4
        messages.append(body[pos:pos + n].decode("utf-8", errors="replace") if n else "")
        pos += n
    if pos != len(body):
        raise ValueError(f"binary reply: {len(body) - pos} bytes after the last record")
    # Few numpy calls (each costs about a microsecond, more than a record's Python): one array
    # per type, its rows contiguous, handed out as views.
    flags = np.array([[h[0] == 0 for h in heads], [h[1] != 0 for h in heads], [h[2] != 0 for h in heads],
                      [h[3] & 1 != 0 for h in heads], [h[3] & 2 != 0 for h in heads]], dtype=bool)
    reals = np.array([[h[k] for h in heads] for k in (5, 6, 7, 8)], dtype=np.float64).reshape(4, count)
    mask = np.unpackbits(np.frombuffer(masks, dtype=np.uint8).reshape(count, mask_bytes),
                         axis=1, count=n_actions).view(np.int8)
    return rid, Batch(ok=flags[0], terminated=flags[1], truncated=flags[2], illegal_action=flags[3],
                      action_had_no_effect=flags[4],
                      step=np.array([h[4] for h in heads], dtype=np.int32),
                      reward=reals[0], time_s=reals[1], initial_time_s=reals[2], best_time_s=reals[3],
                      observation=np.frombuffer(obs, dtype=np.uint8).reshape(count, obs_bytes),
                      mask=mask, message=messages)
