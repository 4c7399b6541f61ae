"""ggml's tensor struct and the ggml-base library of the llama.cpp build spec-decode loaded, for
the kernel scripts that look at graph nodes through an eval callback
(``bench/kernels/kernels_probe.py``, ``bench/kernels/kernels_op_times.py``)."""

from __future__ import annotations

import ctypes
from functools import cache

from spec_decode.backends.llamacpp.library import load, own_library_folder


class GgmlTensor(ctypes.Structure):  # ggml.h of the vendored llama.cpp (0c1e570)
    pass


GgmlTensor._fields_ = [
    ("type", ctypes.c_int),
    ("buffer", ctypes.c_void_p),
    ("ne", ctypes.c_int64 * 4),
    ("nb", ctypes.c_size_t * 4),
    ("op", ctypes.c_int),
    ("op_params", ctypes.c_int32 * 16),
    ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(GgmlTensor) * 10),
    ("view_src", ctypes.POINTER(GgmlTensor)),
    ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p),
    ("name", ctypes.c_char * 64),
    ("extra", ctypes.c_void_p),
    ("padding", ctypes.c_char * 8),
]

#: ggml's type id of float32 tensors.
F32 = 0


@cache
def ggml_base() -> ctypes.CDLL:
    """``libggml-base`` of the libraries loaded, with ``ggml_op_desc`` and ``ggml_type_name``."""
    folder = load().folder or own_library_folder()
    lib = ctypes.CDLL(str(folder / "libggml-base.so"))
    lib.ggml_op_desc.restype = ctypes.c_char_p
    lib.ggml_op_desc.argtypes = [ctypes.POINTER(GgmlTensor)]
    lib.ggml_type_name.restype = ctypes.c_char_p
    lib.ggml_type_name.argtypes = [ctypes.c_int]
    return lib


def library_folder() -> str:
    """Where the loaded llama.cpp libraries are, for the record."""
    return str(load().folder or own_library_folder())
