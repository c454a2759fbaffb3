"""A corpus of hostile and malformed snapshots (issue 16), as {name: file bytes}.

Three families, each small to write and fast to generate:
- bombs: tiny files that ask for gigabytes or minutes (memo index, shared-reference
  "billion laughs" in every free-form field, gzip that inflates a thousandfold, a file
  gzipped twice, 3,000 segments sharing one 3,000-block list, one trace entry shared by a
  whole trace, deep nesting, a declared length past the end, a 5,000-digit JSON integer);
- type and range mutations: every field PyTorch writes, replaced by a string, a list, a
  dict, None, a float, NaN, integers past int64 and uint64, negative and near-2^63 sizes;
- hostile text: terminal escapes, Textual/Rich markup, HTML and script closers in every
  string field (names, filenames, actions, annotations, settings, metadata).

Run as a script to write the corpus to a directory: `python tests/hostile/corpus.py DIR`.
"""

from __future__ import annotations

import copy
import gzip
import json
import pickle
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MiB = 1 << 20
GiB = 1 << 30

HOSTILE_TEXT = {
    "click": "[@click=app.screenshot('/tmp/memlens-pwned.svg')]click me[/]",
    "markup": "[b]bold[/b] [red]red[/red] [link=https://example.com]x[/link]",
    "esc": "\x1b]0;pwned title\x07\x1b[2J\x1b[31mred\x1b[0m\r\x08",
    "html": "<!-- </script><script>alert(1)</script> <img src=x onerror=alert(2)>",
    "bidi": "abc\u202edcba\u2066\x00\x7f\ud800",
    "json": '"}]},{"x":\\u0000',
}


def _frame(
    name: str = "train_step", filename: str = "/home/u/train.py", line: int = 10
) -> dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


def base_snapshot() -> dict[str, Any]:
    """A small, valid snapshot touching every field: shared frames, an OOM, annotations,
    settings, compile context, metadata, forward frames, a segment with blocks."""
    user = _frame()
    torch_fr = _frame("linear", "/usr/lib/python3.11/site-packages/torch/nn/functional.py", 2380)
    stack = [torch_fr, user]
    a0, a1 = 0x7F0000000000, 0x7F0000100000
    trace = [
        {"action": "segment_alloc", "addr": a0, "size": 2 * MiB, "stream": 0, "time_us": 1000,
         "frames": stack},
        {"action": "alloc", "addr": a0, "size": 1000, "stream": 0, "time_us": 1001,
         "frames": stack, "compile_context": "Torch-Compiled Region: 0/0",
         "user_metadata": "step 1", "forward_frames": ["  File fwd.py, line 3\n"]},
        {"action": "alloc", "addr": a1, "size": 4096, "stream": 7, "time_us": 1002,
         "frames": stack, "compile_context": "N/A", "user_metadata": ""},
        {"action": "free_requested", "addr": a1, "size": 4096, "stream": 7, "time_us": 1003,
         "frames": stack},
        {"action": "free_completed", "addr": a1, "size": 4096, "stream": 7, "time_us": 1004,
         "frames": stack},
        {"action": "oom", "device_free": 1 * MiB, "size": 3 * GiB, "stream": 0,
         "time_us": 1005, "frames": stack},
        {"action": "snapshot", "addr": 0, "size": 1024, "stream": 0, "time_us": 1006,
         "frames": []},
    ]  # fmt: skip
    blocks = [
        {"address": a0, "size": 1024, "requested_size": 1000, "state": "active_allocated",
         "frames": stack},
        {"address": a0 + 1024, "size": 2 * MiB - 1024, "requested_size": 0,
         "state": "inactive", "frames": []},
    ]  # fmt: skip
    seg = {
        "device": 0, "address": a0, "total_size": 2 * MiB, "allocated_size": 1024,
        "active_size": 1024, "requested_size": 1000, "stream": 0, "segment_type": "small",
        "segment_pool_id": (0, 0), "is_expandable": False, "frames": stack, "blocks": blocks,
    }  # fmt: skip
    return {
        "segments": [seg],
        "device_traces": [trace],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
            "max_split_size": -1,
            "roundup_power2_divisions": {"1": 0},
        },
        "external_annotations": [
            {"name": "ProfilerStep#1", "stage": "START", "device": 0, "time_us": 1000},
            {"name": "ProfilerStep#1", "stage": "END", "device": 0, "time_us": 1006},
        ],
    }


def _dump(obj: Any, protocol: int = 4) -> bytes:
    return pickle.dumps(obj, protocol=protocol)


def _laughs(levels: int = 32) -> list[object]:
    """A list holding its predecessor twice: 2^levels leaves from a few hundred bytes."""
    x: list[object] = ["lol"]
    for _ in range(levels):
        x = [x, x]
    return x


# Where a free-form (nested) value can go: each setter puts `v` in one field of a snapshot.
FREE_FORM: dict[str, Callable[[dict[str, Any], Any], None]] = {
    "allocator_settings": lambda s, v: s.__setitem__("allocator_settings", {"x": v}),
    "user_metadata": lambda s, v: s["device_traces"][0][1].__setitem__("user_metadata", v),
    "compile_context": lambda s, v: s["device_traces"][0][1].__setitem__("compile_context", v),
    "forward_frames": lambda s, v: s["device_traces"][0][1].__setitem__("forward_frames", v),
    "annotation_name": lambda s, v: s["external_annotations"][0].__setitem__("name", v),
    "frame_name": lambda s, v: s["device_traces"][0][1]["frames"][1].__setitem__("name", v),
    "frame_filename": lambda s, v: s["segments"][0]["frames"][1].__setitem__("filename", v),
    "action": lambda s, v: s["device_traces"][0][2].__setitem__("action", v),
    "stream": lambda s, v: s["device_traces"][0][2].__setitem__("stream", v),
}


def _with(setter: Callable[[dict[str, Any], Any], None], value: Any) -> dict[str, Any]:
    snap = base_snapshot()
    setter(snap, value)
    return snap


def _multi_member_gzip(prefix: bytes, zeros: int) -> bytes:
    """gzip members may be concatenated: one member for the prefix, then one 16 MiB member
    of zeros repeated, so a 3 GiB stream costs a few MB to write and no time to make."""
    chunk = gzip.compress(bytes(16 * MiB), compresslevel=9)
    return gzip.compress(prefix) + chunk * (zeros // (16 * MiB))


def bombs() -> Iterator[tuple[str, bytes]]:
    yield "memo-index-2^28.pickle", MEMO_BOMB
    yield "memo-index-2^31.pickle", b"\x80\x02Nr\xff\xff\xff\x7f."
    for field, setter in FREE_FORM.items():
        yield f"laughs-{field}.pickle", _dump(_with(setter, _laughs()))
        yield f"laughs-tuple-{field}.pickle", _dump(_with(setter, _tuple_laughs()))
    yield "deep-nesting-settings.pickle", _deep_settings(200_000)
    yield "deep-nesting-top.pickle", b"\x80\x04" + _nested_lists(200_000) + b"."
    yield "gzip-inflates-3GiB.pickle.gz", gzip_bomb()
    yield "gzip-json-3GiB.json.gz", gzip_bomb(json_body=True)
    yield "gzip-twice.pickle.gz", gzip.compress(gzip.compress(_dump(base_snapshot())))
    yield "gzip-thrice.pickle.gz", gzip.compress(gzip.compress(gzip.compress(b"\x80\x04N.")))
    yield "declared-length-2^40.pickle", b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b"x."
    yield "frame-length-2^40.pickle", b"\x80\x04\x95" + struct.pack("<Q", 1 << 40) + b"N."
    yield "shared-block-list.pickle", _dump(_shared_blocks(3000, 3000))
    yield "shared-trace-entry.pickle", _dump(_shared_entries(2_000_000))
    yield "shared-trace-list.pickle", _dump(_shared_traces(3000))
    yield from round_two()
    yield "json-int-5000-digits.json", ('{"segments": [], "device_traces": [[{"action": "alloc",'
                                        ' "addr": ' + "9" * 5000 + ', "size": 1}]]}').encode()  # fmt: skip


# issue 27: text laughs (one 1 MiB string referenced a thousand times: 1 MB of file, 1 GiB
# of text), 14 million empty dicts (1.1 GB for the unpickler), addresses colliding in the
# replay's old fixed hash. Slow to refuse or large: in the full run (SLOW_PREFIXES).
SLOW_PREFIXES = ("gzip-inflates", "gzip-json", "text-laughs", "empty-dicts", "hash-flood")


def round_two() -> Iterator[tuple[str, bytes]]:
    yield from _text_laughs_and_dicts()
    yield "hash-flood-200k.pickle", _dump(_colliding_allocations(200_000))


def _text_laughs_and_dicts() -> Iterator[tuple[str, bytes]]:
    big = ["x" * MiB] * 1000
    for field, setter in FREE_FORM.items():
        if field not in ("action", "stream"):
            yield f"text-laughs-{field}.pickle", _dump(_with(setter, big))
    head = pickle.dumps({"segments": [], "device_traces": []}, protocol=2)[:-2]
    yield "empty-dicts-14M.pickle", head + b"\x8c\x01x(" + b"}" * 14_000_000 + b"lu."


MEMO_BOMB = b"\x80\x02Nr\x00\x00\x00\x10."  # LONG_BINPUT 2^28: a 4 GB memo table
# the attacks on the memory bound where RLIMIT_AS cannot hold it (a Dask worker, a notebook
# kernel: other threads run), and the limit each must stop at (tests/hostile/test_hosts.py)
HOST_LIMITS = {"memo-index": "memo", "text-laughs": "text", "empty-dicts": "memory",
               "gzip": "decompressed"}  # fmt: skip


def gzip_bomb(json_body: bool = False) -> bytes:
    """3 MB of gzip inflating to 3 GiB: a BINBYTES8 payload (or a JSON list) that never ends."""
    header = b"[" if json_body else b"\x80\x04\x8e" + struct.pack("<Q", 3 * GiB)
    return _multi_member_gzip(header, 3 * GiB)


def host_attacks() -> Iterator[tuple[str, bytes]]:
    yield "memo-index-2^28.pickle", MEMO_BOMB
    yield "memo-index-2^31.pickle", b"\x80\x02Nr\xff\xff\xff\x7f."
    yield from _text_laughs_and_dicts()
    yield "gzip-inflates-3GiB.pickle.gz", gzip_bomb()
    yield "gzip-json-3GiB.json.gz", gzip_bomb(json_body=True)


def _colliding_allocations(n: int) -> dict[str, Any]:
    """`n` allocations at addresses whose old replay hash (a ^ a>>29, times a constant,
    ^ >>32) ends in 20 zero bits: one probe run in any table up to 2^20 slots."""
    inverse = pow(0xBF58476D1CE4E5B9, -1, 1 << 64)

    def preimage(h: int) -> int:
        x = ((h ^ (h >> 32)) * inverse) & ((1 << 64) - 1)
        return x ^ (x >> 29) ^ (x >> 58)

    trace = [{"action": "alloc", "addr": preimage(k << 20), "size": 512, "stream": 0}
             for k in range(1, n + 1)]  # fmt: skip
    return {"segments": [], "device_traces": [trace]}


def _tuple_laughs(levels: int = 32) -> tuple[object, ...]:
    x: tuple[object, ...] = ("lol",)
    for _ in range(levels):
        x = (x, x)
    return x


def _nested_lists(depth: int) -> bytes:
    """Opcodes for a list nested `depth` deep (pickle.dumps itself would recurse)."""
    return b"]" * depth + b"a" * (depth - 1)


def _short_str(s: str) -> bytes:
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def _deep_settings(depth: int) -> bytes:
    return (
        b"\x80\x04}"
        + _short_str("segments") + b"]s"
        + _short_str("device_traces") + b"]s"
        + _short_str("allocator_settings") + b"}" + _short_str("x") + _nested_lists(depth)
        + b"ss."
    )  # fmt: skip


def _shared_blocks(segments: int, blocks: int) -> dict[str, Any]:
    shared = [
        {"address": 0, "size": 512, "requested_size": 512, "state": "active_allocated",
         "frames": []}
        for _ in range(1)
    ] * blocks  # fmt: skip
    segs = [
        {"device": 0, "address": i << 32, "total_size": 512 * blocks, "stream": 0,
         "segment_type": "large", "blocks": shared}
        for i in range(segments)
    ]  # fmt: skip
    return {"segments": segs, "device_traces": []}


def _shared_entries(n: int) -> dict[str, Any]:
    entry = {"action": "alloc", "addr": 1 << 40, "size": 512, "stream": 0, "time_us": 1}
    entry.update({f"k{i}": i for i in range(200)})
    return {"segments": [], "device_traces": [[entry] * n]}


def _shared_traces(devices: int) -> dict[str, Any]:
    trace = base_snapshot()["device_traces"][0] * 300
    return {"segments": [], "device_traces": [trace] * devices}


# (field label, path setter) for the type and range mutations
def _trace_field(i: int, key: str) -> Callable[[dict[str, Any], Any], None]:
    return lambda s, v: s["device_traces"][0][i].__setitem__(key, v)


def _seg_field(key: str) -> Callable[[dict[str, Any], Any], None]:
    return lambda s, v: s["segments"][0].__setitem__(key, v)


def _block_field(key: str) -> Callable[[dict[str, Any], Any], None]:
    return lambda s, v: s["segments"][0]["blocks"][0].__setitem__(key, v)


def _ann_field(key: str) -> Callable[[dict[str, Any], Any], None]:
    return lambda s, v: s["external_annotations"][0].__setitem__(key, v)


FIELDS: dict[str, Callable[[dict[str, Any], Any], None]] = {
    **{f"entry.{k}": _trace_field(1, k) for k in (
        "action", "addr", "size", "stream", "time_us", "frames", "compile_context",
        "user_metadata", "forward_frames")},
    "oom.device_free": _trace_field(5, "device_free"),
    "oom.size": _trace_field(5, "size"),
    **{f"segment.{k}": _seg_field(k) for k in (
        "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
        "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks")},
    **{f"block.{k}": _block_field(k) for k in (
        "address", "size", "requested_size", "state", "frames")},
    **{f"annotation.{k}": _ann_field(k) for k in ("name", "stage", "device", "time_us")},
    "frame.line": lambda s, v: s["segments"][0]["frames"][0].__setitem__("line", v),
    "frame.name": lambda s, v: s["segments"][0]["frames"][0].__setitem__("name", v),
    "frame": lambda s, v: s["segments"][0]["frames"].__setitem__(0, v),
    "device_traces[0]": lambda s, v: s["device_traces"].__setitem__(0, v),
    "segments[0]": lambda s, v: s["segments"].__setitem__(0, v),
    "allocator_settings": lambda s, v: s.__setitem__("allocator_settings", v),
    "external_annotations": lambda s, v: s.__setitem__("external_annotations", v),
}  # fmt: skip

BAD_VALUES: dict[str, Any] = {
    "str": "12",
    "list": [1, 2],
    "dict": {"a": 1},
    "none": None,
    "float": 1.5,
    "nan": float("nan"),
    "int65": 1 << 65,
    "neg-int65": -(1 << 65),
    "near-2^63": (1 << 63) - 512,
    "negative": -4096,
    "int-1000-digits": 10**1000,
    "bytes": b"\x00\x01",
}


def mutations() -> Iterator[tuple[str, bytes]]:
    for field, setter in FIELDS.items():
        for label, value in BAD_VALUES.items():
            yield f"type-{field}={label}.pickle", _dump(_with(setter, value))
    # sizes whose sum overflows int64 while each fits
    big = base_snapshot()
    for e in big["device_traces"][0]:
        e["size"] = (1 << 62) + 1
    yield "sum-overflow-trace.pickle", _dump(big)
    segs = base_snapshot()
    segs["segments"] = [copy.deepcopy(segs["segments"][0]) for _ in range(4)]
    for s in segs["segments"]:
        s["total_size"] = (1 << 62) - 1
    yield "sum-overflow-segments.pickle", _dump(segs)
    yield "top-level-int.pickle", _dump(7)
    yield "top-level-list-of-ints.pickle", _dump([1, 2, 3])
    yield (
        "json-nan.json",
        b'{"segments": [], "device_traces": [[{"action": "alloc", "addr": NaN}]]}',
    )


def hostile_text() -> Iterator[tuple[str, bytes]]:
    """Every string field of the base snapshot replaced by each hostile string."""
    for label, text in HOSTILE_TEXT.items():
        snap = base_snapshot()
        trace = snap["device_traces"][0]
        fr = trace[1]["frames"]
        fr[0]["name"] = f"{text} fn"
        fr[0]["filename"] = f"/x/{text}.py"
        fr[1]["name"] = text
        trace[1]["compile_context"] = text
        trace[1]["user_metadata"] = text
        trace[1]["forward_frames"] = [text]
        trace[2]["action"] = text  # an unknown action named with markup
        snap["segments"][0]["segment_type"] = text
        snap["external_annotations"][0]["name"] = text
        snap["external_annotations"][1]["name"] = text
        snap["allocator_settings"][text] = text
        yield f"text-{label}.pickle", _dump(snap)
        yield f"text-{label}.json", json.dumps(snap).encode()


def corpus(*, large: bool = True) -> Iterator[tuple[str, bytes]]:
    """Every case; `large=False` leaves out the few that take seconds each to refuse."""
    for name, data in bombs():
        if large or not name.startswith(SLOW_PREFIXES):
            yield name, data
    yield from mutations()
    yield from hostile_text()


def write_corpus(out: Path, *, large: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in corpus(large=large):
        p = out / name.replace("/", "_")
        p.write_bytes(data)
        paths.append(p)
    return paths


if __name__ == "__main__":
    for p in write_corpus(Path(sys.argv[1])):
        print(f"{p.stat().st_size:>10,}  {p}")
