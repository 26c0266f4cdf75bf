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


def decode_batch(body: bytes, n_actions: int, obs_bytes: int) -> tuple[int, Batch]:
    """The reply's id and its records as arrays; every entry has `n_actions` actions and
    `obs_bytes` bytes of observation (failed entries carry none)."""
    magic, version, count, rid = _HEAD.unpack_from(body, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a binary reply (magic {magic:#x}, version {version})")
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
