"""kern_runtime.readback on the null device: queued reads, slot reuse, release; and the
Runtime's read_async and copy on top of it. CPU."""

import numpy as np
import pytest

from krt_null import BASE, NullDevice, load_null, null_cubin
from kern_runtime import CallerError
from kern_runtime.readback import ReadRing


def device(nbytes: int = 64):
    """A null device with an arena of ``nbytes`` (at BASE) and a stream."""
    dev = NullDevice()
    dev.arena(nbytes, 256, "arena")
    return dev, dev.stream()


def put(dev: NullDevice, values, addr: int = BASE) -> None:
    b = np.asarray(values, np.int64).view(np.uint8)
    dev.view(addr, b.size)[:] = b


#: The calls a queued read and its wait make.
READ_OPS = ("d2h", "record", "wait event")


def test_wait_returns_the_value_at_queue_time_even_after_the_device_changed():
    dev, s = device()
    ring = ReadRing(dev, 16)
    put(dev, [7, 8])
    p = ring.queue(BASE, (2,), np.dtype("<i8"), 16, s, "read `t`")
    put(dev, [9, 9])
    assert p.wait().tolist() == [7, 8] and p.waited
    assert p.wait() is p.wait()
    assert dev.ops(*READ_OPS) == [("d2h", BASE, 16, "read `t`"), ("record", s.id), ("wait event",)]


def test_reusing_a_slot_materialises_the_earlier_read_first():
    dev, s = device()
    ring = ReadRing(dev, 8, depth=2)
    ps = []
    for v in (1, 2, 3, 4, 5):
        put(dev, [v])
        ps.append(ring.queue(BASE, (1,), np.dtype("<i8"), 8, s, "read `t`"))
    # the 3rd queue reused slot 0, so read 1 was copied out then; 4th: read 2; 5th: read 3
    assert [p.waited for p in ps] == [True, True, True, False, False]
    assert [int(p.wait()[0]) for p in ps] == [1, 2, 3, 4, 5]


def test_a_waited_read_leaves_its_slot_free():
    dev, s = device()
    ring = ReadRing(dev, 8, depth=1)
    put(dev, [4])
    assert int(ring.queue(BASE, (1,), np.dtype("<i8"), 8, s, "r").wait()[0]) == 4
    n_sync = len(dev.ops("wait event"))
    put(dev, [6])
    assert int(ring.queue(BASE, (1,), np.dtype("<i8"), 8, s, "r").wait()[0]) == 6
    assert len(dev.ops("wait event")) == n_sync + 1   # no extra wait for the old slot


def test_zero_byte_read_queues_nothing():
    dev, s = device()
    p = ReadRing(dev, 8).queue(BASE, (0,), np.dtype("<i8"), 0, s, "r")
    assert p.wait().shape == (0,) and dev.ops(*READ_OPS) == []


def test_too_large_and_read_after_free():
    dev, s = device()
    ring = ReadRing(dev, 8)
    with pytest.raises(ValueError, match="read `t`: 16 bytes do not fit a 8-byte slot"):
        ring.queue(BASE, (2,), np.dtype("<i8"), 16, s, "read `t`")
    put(dev, [3])
    p = ring.queue(BASE, (1,), np.dtype("<i8"), 8, s, "read `t`")
    ring.free()
    assert sorted(c[0] for c in dev.ops("free pinned", "destroy event")) == [
        "destroy event", "destroy event", "free pinned", "free pinned"]
    with pytest.raises(CallerError, match="read `t`: the runtime was closed before this read"):
        p.wait()


# --- Runtime.copy / Runtime.read_async without a GPU: the toy manifest on the null device ---

def toy_runtime(tmp_path, edit=None):
    """The toy manifest loaded on the null device; buffer bytes are 0, 1, 2, ... (mod 256).
    ``edit``: called with the manifest's JSON object before it is written and loaded."""
    import hashlib
    import json

    from krt_helpers import EXAMPLES, st_tensor, write_safetensors

    obj = json.loads((EXAMPLES / "toy" / "manifest.json").read_text())
    cubin = null_cubin(tmp_path / "k" / "toy.cubin",
                       {s["symbol"]: s["params"] for k in obj["kernels"].values()
                        for s in k["impl"]["steps"]})
    obj["kernels"]["norm"]["impl"]["steps"][0]["sha256"] = hashlib.sha256(
        cubin.read_bytes()).hexdigest()
    if edit is not None:
        edit(obj)
    (tmp_path / "m.json").write_text(json.dumps(obj))
    w = write_safetensors(tmp_path / "w.safetensors",
                          {"gamma": st_tensor(np.zeros(128, np.uint16), "BF16")})
    rt, dev = load_null(tmp_path / "m.json", tmp_path / "k", [w], capacity=16)
    for name, addr in rt.addresses.buffers.items():
        n = rt.plan.buffers[name].nbytes
        dev.view(addr, n)[:] = np.arange(n, dtype=np.int64).astype(np.uint8)
    return rt, dev


def test_runtime_read_async_shape_and_bytes(tmp_path):
    rt, dev = toy_runtime(tmp_path)
    rt.run("step", {"tokens": 3}, graph=False)         # writes `y` (the null kernels: no bytes)
    p = rt.read_async("y", {"tokens": 3})              # f32 [tokens]
    assert dev.ops("d2h") == [("d2h", rt.addresses.buffers["y"], 12, "read `y`")]
    got = p.wait()
    assert got.dtype == np.dtype("<f4") and got.shape == (3,)
    assert got.view(np.uint8).tolist() == list(range(12))
    with pytest.raises(CallerError, match="unknown buffer `nope`"):
        rt.read_async("nope")
    with pytest.raises(CallerError, match="read `y`"):
        rt.read_async("y", {"tokens": 0})


def test_runtime_copy_checks_and_queues(tmp_path):
    rt, dev = toy_runtime(tmp_path)
    x, h = rt.addresses.buffers["x"], rt.addresses.buffers["h"]
    dev.view(h, 512)[:] = 0xAB
    rt.copy("x", "h", {"tokens": 2})                   # bf16 [2, 128] into the input's prefix
    assert dev.ops("d2d") == [("d2d", x, h, 512, "copy `h` into `x`")]
    assert (dev.view(x, 512) == 0xAB).all()
    assert dev.view(x + 512, 4).tolist() == [0, 1, 2, 3]   # the rest of x untouched (512 % 256)
    with pytest.raises(CallerError, match="copy into `y`: it is an output buffer"):
        rt.copy("y", "x")
    rt.run("step", {"tokens": 2}, graph=False)         # else: `y` unwritten (test_written.py)
    with pytest.raises(CallerError, match=r"copy `y` \(f32\) into `x` \(bf16\): the dtypes differ"):
        rt.copy("x", "y")
    with pytest.raises(CallerError, match="unknown buffer `nope`"):
        rt.copy("x", "nope")
    assert len(dev.ops("d2d")) == 1                    # the refused copies queued nothing
    rt.copy("x", "h", {"tokens": 3}, dst_row=5)        # rows 5 … 7 of x (256 bytes a row)
    assert dev.ops("d2d")[-1] == ("d2d", x + 5 * 256, h, 768, "copy `h` into `x`")
    rt.copy("x", "h", {"tokens": 1}, dst_row=255)      # the last row fits
    with pytest.raises(CallerError, match=r"copy `h` into `x`: 512 bytes at byte 65280 do not "
                                          r"fit its 65536"):
        rt.copy("x", "h", {"tokens": 2}, dst_row=255)
    with pytest.raises(CallerError, match=r"at row -1: rows count from 0 along a leading "
                                          r"symbol dimension"):
        rt.copy("x", "h", {"tokens": 1}, dst_row=-1)
    assert len(dev.ops("d2d")) == 3
    rt.close()
    with pytest.raises(CallerError, match="this runtime was closed"):
        rt.copy("x", "h")
