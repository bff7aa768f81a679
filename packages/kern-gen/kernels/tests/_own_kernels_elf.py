"""Read what the tests need from a CUDA cubin (an ELF64 file), with the standard library only.

- global function symbols (kernel entry points) from ``.symtab``;
- each kernel's parameter layout from ``.nv.info.<kernel>``: the ``EIATTR_KPARAM_INFO``
  attributes (ordinal, offset, size) — the layout ``cuFuncGetParamInfo`` reports.
"""
from __future__ import annotations

import struct
from pathlib import Path

_SHT_SYMTAB = 2
_STT_FUNC = 2
_STB_GLOBAL = 1
_EIFMT_SVAL = 4
_EIATTR_KPARAM_INFO = 0x17


class Cubin:
    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not a little-endian ELF64 file")
        self.data = data
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        self.sections = []
        for i in range(shnum):
            name, typ, _flags, _addr, off, size, link, info, _align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + i * shentsize)
            self.sections.append(dict(name_off=name, type=typ, off=off, size=size, link=link,
                                      info=info, entsize=entsize))
        shstr = self.sections[shstrndx]["off"]
        for s in self.sections:
            s["name"] = self._cstr(shstr + s["name_off"])

    @classmethod
    def read(cls, path: Path) -> "Cubin":
        return cls(Path(path).read_bytes())

    def _cstr(self, off: int) -> str:
        end = self.data.index(b"\0", off)
        return self.data[off:end].decode("ascii")

    def section(self, name: str):
        for s in self.sections:
            if s["name"] == name:
                return s
        return None

    def global_functions(self) -> set[str]:
        out = set()
        for s in self.sections:
            if s["type"] != _SHT_SYMTAB:
                continue
            strtab = self.sections[s["link"]]["off"]
            entsize = s["entsize"] or 24
            for j in range(s["size"] // entsize):
                st_name, st_info, _other, _shndx, _value, _size = struct.unpack_from(
                    "<IBBHQQ", self.data, s["off"] + j * entsize)
                if (st_info & 0xF) == _STT_FUNC and (st_info >> 4) == _STB_GLOBAL:
                    out.add(self._cstr(strtab + st_name))
        return out

    def param_layout(self, kernel: str) -> list[tuple[int, int]]:
        """``[(offset, size)]`` of the kernel's parameters in ordinal order."""
        s = self.section(f".nv.info.{kernel}")
        if s is None:
            raise KeyError(f"no .nv.info section for {kernel}")
        blob = self.data[s["off"]:s["off"] + s["size"]]
        params = {}
        i = 0
        while i + 4 <= len(blob):
            fmt, attr = blob[i], blob[i + 1]
            if fmt == _EIFMT_SVAL:
                (size,) = struct.unpack_from("<H", blob, i + 2)
                payload = blob[i + 4:i + 4 + size]
                i += 4 + size
            else:
                payload = blob[i + 2:i + 4]
                i += 4
            if attr == _EIATTR_KPARAM_INFO and fmt == _EIFMT_SVAL:
                _index, ordinal, offset, flags = struct.unpack_from("<IHHI", payload)
                params[ordinal] = (offset, (flags >> 18) & 0x3FFF)
        return [params[k] for k in sorted(params)]
