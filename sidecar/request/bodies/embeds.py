"""How many tokens a prompt given as embeddings is: the rows of its tensor.

vLLM's completions take `prompt_embeds`, each a base64 `torch.save` file of a
(seq_len, hidden_size) tensor (or (1, seq_len, hidden_size)), dense or sparse; each row
is a token it prefills. The file's size says nothing of it (a sparse tensor of 4 000
empty rows takes 2 KB), so the shape is read where torch keeps it: the pickle in the
file's zip archive. That pickle is read by an unpickler that builds nothing but the few
names a saved tensor is made of and refuses every other (torch's own weights-only
loader allows a wider list, for models); no tensor data is loaded.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
import zipfile
from collections import OrderedDict
from typing import Any

from sidecar.request.bodies.limits import InvalidRequest

# torch writes a few hundred bytes of pickle for one tensor.
_MAX_PICKLE_BYTES = 64 * 1024


class _Shape(tuple[int, ...]):
    """A tensor, known only by its size."""


def _dense(_storage: Any, _offset: Any, size: Any, *_rest: Any) -> _Shape:
    return _Shape(size)


def _sparse(layout: Any, data: Any) -> _Shape:
    # (indices, values, size, ...) for COO; (compressed, plain, values, size) for the rest.
    return _Shape(data[2] if layout == "torch.sparse_coo" else data[3])


def _layout(name: Any) -> Any:
    return name


def _size(dims: Any) -> tuple[int, ...]:
    return tuple(dims)


class _Storage:
    """A storage type named in the pickle; the data it points to is never read."""


_GLOBALS: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _dense,
    ("torch._utils", "_rebuild_tensor_v3"): _dense,
    ("torch._utils", "_rebuild_sparse_tensor"): _sparse,
    ("torch.serialization", "_get_layout"): _layout,
    ("torch", "Size"): _size,
    ("collections", "OrderedDict"): OrderedDict,
}


class _ShapeReader(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _GLOBALS.get((module, name))
        if found is not None:
            return found
        if module == "torch" and name.endswith("Storage"):
            return _Storage
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a saved tensor")

    def persistent_load(self, pid: Any) -> Any:
        return _Storage()


def embedding_rows(entry: Any, where: str) -> int:
    """The tokens one `prompt_embeds` entry prefills; a 400 naming `where` for an entry
    that is not a saved 2-D tensor (the engine refuses it too)."""
    if not isinstance(entry, str):
        raise InvalidRequest(f"'{where}' must be a base64 string.", where)
    try:
        raw = base64.b64decode(entry, validate=True)
        shape = _shape(raw)
    except (binascii.Error, ValueError, zipfile.BadZipFile, pickle.UnpicklingError) as error:
        raise InvalidRequest(
            f"'{where}' is not a tensor saved by torch.save: {error}", where
        ) from None
    except Exception:  # any other way a crafted pickle fails: still not a tensor file
        raise InvalidRequest(f"'{where}' is not a tensor saved by torch.save.", where) from None
    if len(shape) == 3 and shape[0] == 1:
        shape = _Shape(shape[1:])
    if len(shape) != 2 or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise InvalidRequest(
            f"'{where}' must be of shape (seq_len, hidden_size), not {tuple(shape)}.", where
        )
    return shape[0]


def _shape(raw: bytes) -> _Shape:
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(names) != 1:
            raise ValueError("no data.pkl in its archive")
        info = archive.getinfo(names[0])
        if info.file_size > _MAX_PICKLE_BYTES:
            raise ValueError("its pickle is larger than a tensor's")
        data = archive.read(info)
    shape = _ShapeReader(io.BytesIO(data)).load()
    if not isinstance(shape, _Shape):
        raise ValueError("it holds no tensor")
    return shape
