"""kern_runtime.readback on a fake memory backend: queued reads, slot reuse, release. CPU."""

import numpy as np
import pytest

from kern_runtime import CallerError
from kern_runtime.readback import ReadRing


class FakeMem:
    """A 'device' of byte arrays by address; copies run at once, events record the order."""

    def __init__(self) -> None:
        self.device: dict[int, np.ndarray] = {}
        self.log: list[tuple] = []
        self.freed: list[str] = []
        test = self

        class PinnedBuffer:
            def __init__(self, nbytes: int) -> None:
                self.array = np.zeros(nbytes, np.uint8)
                self.addr = id(self.array)
                test.pinned[self.addr] = self.array

            def free(self) -> None:
                test.freed.append("pinned")

        class Event:
            def __init__(self, timing: bool = True) -> None:
                assert timing is False

            def record(self, stream) -> None:
                test.log.append(("record", stream))

            def synchronize(self) -> None:
                test.log.append(("sync",))

            def destroy(self) -> None:
                test.freed.append("event")

        self.pinned: dict[int, np.ndarray] = {}
        self.PinnedBuffer, self.Event = PinnedBuffer, Event

    def d2h(self, dst: int, src: int, n: int, stream, where=None) -> None:
        self.log.append(("d2h", n, where))
        self.pinned[dst][:n] = self.device[src][:n]


def put(mem: FakeMem, addr: int, values) -> None:
    mem.device[addr] = np.asarray(values, np.int64).view(np.uint8).copy()


def test_wait_returns_the_value_at_queue_time_even_after_the_device_changed():
    mem = FakeMem()
    ring = ReadRing(mem, 16)
    put(mem, 1, [7, 8])
    p = ring.queue(1, (2,), np.dtype("<i8"), 16, "s", "read `t`")
    put(mem, 1, [9, 9])
    assert p.wait().tolist() == [7, 8] and p.waited
    assert p.wait() is p.wait()
    assert mem.log == [("d2h", 16, "read `t`"), ("record", "s"), ("sync",)]


def test_reusing_a_slot_materialises_the_earlier_read_first():
    mem = FakeMem()
    ring = ReadRing(mem, 8, depth=2)
    ps = []
    for v in (1, 2, 3, 4, 5):
        put(mem, 1, [v])
        ps.append(ring.queue(1, (1,), np.dtype("<i8"), 8, "s", "read `t`"))
    # the 3rd queue reused slot 0, so read 1 was copied out then; 4th: read 2; 5th: read 3
    assert [p.waited for p in ps] == [True, True, True, False, False]
    assert [int(p.wait()[0]) for p in ps] == [1, 2, 3, 4, 5]


def test_a_waited_read_leaves_its_slot_free():
    mem = FakeMem()
    ring = ReadRing(mem, 8, depth=1)
    put(mem, 1, [4])
    assert int(ring.queue(1, (1,), np.dtype("<i8"), 8, "s", "r").wait()[0]) == 4
    n_sync = mem.log.count(("sync",))
    put(mem, 1, [6])
    assert int(ring.queue(1, (1,), np.dtype("<i8"), 8, "s", "r").wait()[0]) == 6
    assert mem.log.count(("sync",)) == n_sync + 1   # no extra wait for the old slot


def test_zero_byte_read_queues_nothing():
    mem = FakeMem()
    p = ReadRing(mem, 8).queue(1, (0,), np.dtype("<i8"), 0, "s", "r")
    assert p.wait().shape == (0,) and mem.log == []


def test_too_large_and_read_after_free():
    mem = FakeMem()
    ring = ReadRing(mem, 8)
    with pytest.raises(ValueError, match="read `t`: 16 bytes do not fit a 8-byte slot"):
        ring.queue(1, (2,), np.dtype("<i8"), 16, "s", "read `t`")
    put(mem, 1, [3])
    p = ring.queue(1, (1,), np.dtype("<i8"), 8, "s", "read `t`")
    ring.free()
    assert sorted(mem.freed) == ["event", "event", "pinned", "pinned"]
    with pytest.raises(CallerError, match="read `t`: the runtime was closed before this read"):
        p.wait()


# --- Runtime.copy / Runtime.read_async without a GPU: a prepared toy runtime, fake memory ---

def toy_runtime(tmp_path):
    """The toy manifest prepared for real (CPU), its device calls going to a FakeMem whose
    'device' holds every buffer at the planned addresses."""
    import hashlib
    import json

    from krt_helpers import EXAMPLES, st_tensor, write_safetensors
    from kern_runtime import Runtime, prepare

    obj = json.loads((EXAMPLES / "toy" / "manifest.json").read_text())
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "toy.cubin").write_bytes(b"CUBIN")
    obj["kernels"]["norm"]["impl"]["steps"][0]["sha256"] = hashlib.sha256(b"CUBIN").hexdigest()
    (tmp_path / "m.json").write_text(json.dumps(obj))
    w = write_safetensors(tmp_path / "w.safetensors",
                          {"gamma": st_tensor(np.zeros(128, np.uint16), "BF16")})
    rt = Runtime.__new__(Runtime)
    rt._init(prepare(tmp_path / "m.json", tmp_path / "k", [w], capacity=16), 0)
    mem = FakeMem()
    mem.d2d = lambda dst, src, n, stream, where=None: mem.log.append(("d2d", dst, src, n, where))
    rt._mem, rt._stream = mem, "stream"
    rt.addresses = rt.plan.addresses(0x10000)
    for name, addr in rt.addresses.buffers.items():
        mem.device[addr] = np.arange(rt.plan.buffers[name].nbytes, dtype=np.int64).astype(np.uint8)
    return rt, mem


def test_runtime_read_async_shape_and_bytes(tmp_path):
    rt, mem = toy_runtime(tmp_path)
    p = rt.read_async("y", {"tokens": 3})              # f32 [tokens]
    assert mem.log[0] == ("d2h", 12, "read `y`")
    got = p.wait()
    assert got.dtype == np.dtype("<f4") and got.shape == (3,)
    assert got.view(np.uint8).tolist() == list(range(12))
    with pytest.raises(CallerError, match="unknown buffer `nope`"):
        rt.read_async("nope")
    with pytest.raises(CallerError, match="read `y`"):
        rt.read_async("y", {"tokens": 0})


def test_runtime_copy_checks_and_queues(tmp_path):
    rt, mem = toy_runtime(tmp_path)
    rt.copy("x", "h", {"tokens": 2})                   # bf16 [2, 128] into the input's prefix
    assert mem.log == [("d2d", rt.addresses.buffers["x"], rt.addresses.buffers["h"], 512,
                        "copy `h` into `x`")]
    with pytest.raises(CallerError, match="copy into `y`: it is an output buffer"):
        rt.copy("y", "x")
    with pytest.raises(CallerError, match=r"copy `y` \(f32\) into `x` \(bf16\): the dtypes differ"):
        rt.copy("x", "y")
    with pytest.raises(CallerError, match="unknown buffer `nope`"):
        rt.copy("x", "nope")
    rt._closed = True
    with pytest.raises(CallerError, match="this runtime was closed"):
        rt.copy("x", "h")
