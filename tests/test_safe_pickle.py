"""fedgl's pickle reader builds new objects only: crafted Planetoid files that patch a class,
call a function or reach a global by a dotted name are refused in one line, and no class of the
process changes. Each attack is first shown to work with Python's own unpickler (the control),
so the refusal means something."""

from __future__ import annotations

import collections
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from fedgl.data.csr import CSR
from fedgl.data.safe_pickle import restricted_load
from fedgl.errors import DataError

ORIGINAL_TOARRAY = sp.csr_matrix.toarray


def _unicode(s: str) -> bytes:
    data = s.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _refused(tmp_path: Path, blob: bytes, *words: str) -> str:
    path = tmp_path / "ind.cora.x"
    path.write_bytes(blob)
    with pytest.raises(DataError) as err:
        restricted_load(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    for w in words:
        assert w in msg, msg
    assert sp.csr_matrix.toarray is ORIGINAL_TOARRAY
    return msg


# A pickle that sets ``csr_matrix.toarray = numpy.dtype`` on the class itself (BUILD with a
# slot state on a global): the attack that replaced the method for the whole process.
PATCH_CLASS = (b"\x80\x02cscipy.sparse\ncsr_matrix\n" + b"N}" + _unicode("toarray")
               + b"cnumpy\ndtype\ns" + b"\x86b.")


def test_control_python_unpickler_patches_the_class():
    try:
        pickle.loads(PATCH_CLASS)
        assert sp.csr_matrix.toarray is np.dtype
    finally:
        sp.csr_matrix.toarray = ORIGINAL_TOARRAY
    assert sp.csr_matrix.toarray is ORIGINAL_TOARRAY


def test_build_on_a_class_is_refused(tmp_path):
    _refused(tmp_path, PATCH_CLASS, "refused", "state of scipy.sparse.csr_matrix")


def test_build_on_a_fresh_matrix_may_not_add_attributes(tmp_path):
    """A fresh csr_matrix whose state carries a ``toarray`` entry (it would shadow the method on
    that instance) is refused: only the known sparse attributes are accepted."""
    good = pickle.dumps(sp.random(4, 5, density=0.5, format="csr", random_state=0), protocol=2)
    assert good.endswith(b"ub.")  # the state dict's SETITEMS, BUILD, STOP
    tampered = good[:-3] + _unicode("toarray") + b"K\x01ub."  # one more key in that dict
    _refused(tmp_path, tampered, "attribute 'toarray'")


def test_second_build_on_a_built_array_is_refused(tmp_path):
    blob = pickle.dumps(np.arange(3, dtype=np.int64), protocol=2)
    state_start = blob.index(b"(K\x01")     # the array's state tuple (version 1, ...)
    state = blob[state_start:blob.rindex(b"b.")]
    twice = blob[:-1] + state + b"b."        # set the state of the same array again
    _refused(tmp_path, twice, "already built array")


def test_call_of_os_system_is_refused(tmp_path):
    target = tmp_path / "pwned"
    blob = (b"\x80\x02cos\nsystem\n" + _unicode(f"touch {target}") + b"\x85R.")
    assert pickle.loads(blob) == 0 and target.exists()  # control: it runs a shell command
    target.unlink()
    _refused(tmp_path, blob, "os.system", "refused")
    assert not target.exists()


def test_allowed_name_cannot_call_anything_else(tmp_path):
    """``numpy.dtype`` is allowed as a dtype constructor; calling ``list`` (allowed only as a
    defaultdict factory) or a dtype of Python objects is not."""
    _refused(tmp_path, b"\x80\x02c__builtin__\nlist\n)R.", "call of __builtin__.list")
    obj_array = pickle.dumps(np.array([1, "a"], dtype=object), protocol=2)
    _refused(tmp_path, obj_array, "dtype 'O8'")


# Protocol 4 names globals by (module, qualified name): a dotted name walks attributes, here to
# a scipy module's globals, into which SETITEM then writes.
DOTTED = (b"\x80\x04" + _unicode("scipy.sparse") + _unicode("csr_matrix.__init__.__globals__")
          + b"\x93" + _unicode("fedgl_planted") + b"K\x01s.")


def test_control_python_unpickler_follows_a_dotted_name():
    import scipy.sparse._compressed as compressed

    try:  # control: Python's unpickler walks the dotted name and writes into a module
        pickle.loads(DOTTED)
        assert compressed.fedgl_planted == 1
    finally:
        compressed.__dict__.pop("fedgl_planted", None)


def test_dotted_global_is_refused_by_fedgl(tmp_path):
    import scipy.sparse._compressed as compressed

    _refused(tmp_path, DOTTED, "scipy.sparse.csr_matrix.__init__.__globals__", "refused")
    assert not hasattr(compressed, "fedgl_planted")


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_planetoid_types_round_trip_at_every_protocol(tmp_path, protocol):
    """What fedgl builds equals what was pickled (numpy 2 / scipy / Python 3 writers too)."""
    objs = {"csr": sp.random(6, 9, density=0.3, format="csr", random_state=1, dtype=np.float32),
            "array": np.arange(12, dtype=np.float64).reshape(3, 4),
            "fortran": np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),
            "big_endian": np.arange(4, dtype=">i4"), "empty": np.zeros((0, 3)),
            "graph": collections.defaultdict(list, {0: [1, 2], 1: [0], 2: []})}
    for name, obj in objs.items():
        path = tmp_path / f"{name}.pkl"
        path.write_bytes(pickle.dumps(obj, protocol=protocol))
        got = restricted_load(path)
        if sp.issparse(obj):
            assert type(got) is CSR and got.dtype == obj.dtype
            assert np.array_equal(got.toarray(), obj.toarray())
        elif isinstance(obj, np.ndarray):
            assert got.dtype == obj.dtype and got.shape == obj.shape
            assert np.array_equal(got, obj) and got.flags.writeable
        else:
            assert type(got) is dict and got == dict(obj)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the files name scipy.sparse.csr
def test_real_planetoid_files_equal_python_unpickler(data_root):
    for folder, key in (("Cora", "cora"), ("CiteSeer", "citeseer")):
        for s in ("x", "tx", "allx", "y", "ty", "ally", "graph"):
            path = data_root / folder / "raw" / f"ind.{key}.{s}"
            with open(path, "rb") as f:
                ref = pickle.load(f, encoding="latin1")
            got = restricted_load(path)
            if sp.issparse(ref):
                assert type(got) is CSR and got.shape == ref.shape
                assert got.dtype == ref.dtype and np.array_equal(got.toarray(), ref.toarray())
            elif isinstance(ref, np.ndarray):
                assert got.dtype == ref.dtype and np.array_equal(got, ref)
            else:
                assert got == dict(ref)


def test_mutated_real_files_load_or_fail_in_one_line(tmp_path, data_root):
    """Random byte changes of real Cora files (seeded): every outcome is a value or a one-line
    DataError, never another exception, and no class changes."""
    import random

    rng = random.Random(0)
    path = tmp_path / "ind.cora.x"
    outcomes = {"value": 0, "refused": 0}
    for name in ("y", "x", "graph"):
        data = (data_root / "Cora" / "raw" / f"ind.cora.{name}").read_bytes()
        for _ in range(50):
            blob = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                blob[rng.randrange(len(blob))] = rng.randrange(256)
            path.write_bytes(bytes(blob))
            try:
                restricted_load(path)
                outcomes["value"] += 1
            except DataError as exc:
                assert "\n" not in str(exc)
                outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == 150
    assert sp.csr_matrix.toarray is ORIGINAL_TOARRAY


def test_a_file_above_the_in_memory_size_is_parsed_from_disk_alike(tmp_path, monkeypatch):
    """Small files are parsed from memory, larger ones from the file: the same values."""
    import fedgl.data.safe_pickle as safe_pickle

    path = tmp_path / "graph.pkl"
    obj = collections.defaultdict(list, {k: [k + 1, k + 2] for k in range(300)})
    path.write_bytes(pickle.dumps(obj, protocol=2))
    in_memory = restricted_load(path)
    monkeypatch.setattr(safe_pickle, "IN_MEMORY_BYTES", 10)
    assert restricted_load(path) == in_memory == dict(obj)
