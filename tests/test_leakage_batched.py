"""Systems analysed together equal each system analysed alone: the value-level decoder on a
stack of systems (block-diagonal rows and nodes) against each system decoded alone, by the
sparse passes and by the row-by-row reference; and the linear algebra on the union of systems
against each system solved alone."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import fedgl.privacy.leakage as leakage
import fedgl.privacy.leakage_batches as leakage_batches
import fedgl.privacy.stacked_decoding as stacked
import fedgl.privacy.value_decoding as vd
from fedgl.privacy.sparse_decoding import decode_sparse
from tests.test_leakage_fast import _same, _system


def _sparse(system):
    indptr, members, coef, values, levels, seed, seed_levels = system
    return indptr, members, coef, sp.csr_matrix(values), levels, seed, seed_levels


def _empty(columns=30, levels=(0.0, 1.0)):
    """A system of no rows and no nodes."""
    return (np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0),
            sp.csr_matrix((0, columns)), np.asarray(levels), np.zeros(0, dtype=bool),
            np.zeros((0, columns), dtype=np.int8))


def _systems(seed, levels):
    """Random systems of different sizes (rows, nodes, contributors per row), an empty one
    among them, all over the same columns and alphabet."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(6):
        out.append(_sparse(_system(1000 * seed + k, rows=int(rng.integers(3, 40)),
                                   nodes=int(rng.integers(10, 120)), levels=levels,
                                   max_members=int(rng.integers(2, 10)),
                                   seeded=float(rng.choice([0.0, 0.2, 0.5])))))
    out.insert(int(rng.integers(0, len(out) + 1)), _empty(levels=levels))
    return out


@pytest.mark.parametrize("levels", [(0.0, 1.0), (0.0, 0.5, 1.0), (0.0, 1.0, 2.0, 5.0)])
@pytest.mark.parametrize("seed", range(4))
def test_a_stack_decodes_each_system_as_alone(levels, seed):
    systems = _systems(seed, levels)
    together = list(stacked.decode_stacked(systems))
    assert len(together) == len(systems)
    decided = 0
    for system, got in zip(systems, together, strict=True):
        _same(got, vd.decode_reference(*system))
        if len(system[2]):
            _same(got, decode_sparse(*system))
        decided += int(got.known.sum())
    assert decided > 0


def test_the_stack_is_one_decoder_call(monkeypatch):
    """The systems really are decoded together: one sparse call for all of them."""
    calls = []

    def counted(*args):
        calls.append(len(args[2]))
        return decode_sparse(*args)
    monkeypatch.setattr(stacked, "decode_sparse", counted)
    systems = _systems(7, (0.0, 1.0))
    together = list(stacked.decode_stacked(systems))
    assert calls == [sum(len(s[2]) for s in systems)]
    for system, got in zip(systems, together, strict=True):
        _same(got, vd.decode_reference(*system))


def test_the_enumeration_bound_flags_the_same_nodes_in_a_stack(monkeypatch):
    monkeypatch.setattr(vd, "MAX_COMBINATIONS", 8)
    systems = _systems(3, (0.0, 1.0))
    flagged = 0
    for system, got in zip(systems, stacked.decode_stacked(systems), strict=True):
        _same(got, vd.decode_reference(*system))
        flagged += int(got.unresolved.sum())
    assert flagged > 0


def test_stacks_split_by_size_and_kind(monkeypatch):
    """Stacks stop at the cell bound; dense values, another alphabet or another column count
    start a new one; systems the sparse decoder does not apply to go to the reference."""
    systems = _systems(5, (0.0, 1.0))
    dense = _system(77, levels=(0.0, 1.0))                # dense values: decoded alone
    shifted = _sparse(_system(78, levels=(0.5, 1.0)))     # lowest level not 0: the reference
    wide = _sparse(_system(79, columns=12))               # other columns
    three = _sparse(_system(80, levels=(0.0, 0.5, 1.0)))  # other alphabet
    mixed = systems[:3] + [dense, shifted] + systems[3:5] + [wide, three] + systems[5:]
    cells = 2 * max(len(s[2]) for s in systems) * 30
    monkeypatch.setattr(stacked, "MAX_STACK_CELLS", cells)
    groups = stacked._groups(mixed)
    assert sorted(i for g in groups for i in g) == list(range(len(mixed)))
    assert any(len(g) > 1 for g in groups) and [3] in groups and [8] in groups
    for g in groups:
        assert len(g) == 1 or sum(len(mixed[i][2]) * 30 for i in g) <= cells
    for system, got in zip(mixed, stacked.decode_stacked(mixed), strict=True):
        _same(got, vd.decode_reference(*system))


def test_a_stack_the_sparse_decoder_refuses_goes_system_by_system(monkeypatch):
    """Where the stack's sparse decoding gives up (None), each system is decoded alone."""
    alone = []

    def refuse_stacks(*args):
        return None if len(args[2]) > max(len(s[2]) for s in systems) else decode_sparse(*args)

    def counted(*args):
        alone.append(len(args[2]))
        return vd.decode_reference(*args)
    systems = _systems(9, (0.0, 1.0))
    monkeypatch.setattr(stacked, "decode_sparse", refuse_stacks)
    monkeypatch.setattr(vd, "decode", counted)
    for system, got in zip(systems, stacked.decode_stacked(systems), strict=True):
        _same(got, vd.decode_reference(*system))
    assert len(alone) == len(systems)


def _pairs(seed, n=60):
    """A random system of pairs (row i, node j): rows of 1 to 5 nodes."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(n, size=int(rng.integers(5, 40)), replace=False)
    r, c = [], []
    for i in rows:
        nodes = rng.choice(n, size=int(rng.integers(1, 6)), replace=False)
        r += [i] * len(nodes)
        c += list(nodes)
    return np.asarray(r, dtype=np.int64), np.asarray(c, dtype=np.int64)


@pytest.mark.parametrize("seed", range(4))
def test_the_union_of_systems_solves_each_as_alone(seed):
    systems = [_pairs(100 * seed + k) for k in range(5)]
    systems.insert(2, (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
    found = 0
    for (r, c), got in zip(systems, leakage._solve_all(systems), strict=True):
        want = leakage._solve(r, c)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b)
        found += int(got[1].sum())
    assert found > 0


@pytest.mark.parametrize("kw", [{"hops": 2}, {"hops": 1},
                                {"hops": 2, "secure_sum": "mask", "min_contributors": 2}])
def test_the_report_is_the_same_on_any_number_of_threads(monkeypatch, kw):
    """The systems dealt into shares analysed on threads: the same report as on one thread,
    and the shares really run on the report's threads."""
    import threading

    from fedgl.config import Config
    from fedgl.privacy.leakage import leakage_report
    from tests.test_leakage_fast import _small_binary_graph

    graph, part = _small_binary_graph(sum(map(ord, str(kw))) + 1)
    cfg = Config.from_dict({"clients": 4, **kw})
    one = leakage_report(graph, part, cfg, 1)
    assert one["total"]["exact_remote_nodes"] > 0
    names = []
    real = leakage._solve_all

    def spy(systems):
        names.append(threading.current_thread().name)
        return real(systems)
    monkeypatch.setattr(leakage, "_solve_all", spy)
    systems = 4 + (1 if kw.get("secure_sum") == "mask" else 4)   # the clients', the server's
    for workers in (2, 3, 16):
        names.clear()
        assert leakage_report(graph, part, cfg, workers) == one
        assert len(names) == min(workers, systems)     # one share per thread, the first here
        here = threading.current_thread().name
        assert names.count(here) == 1
        assert all(name.startswith("fedgl-leakage") for name in names if name != here)


def test_shares_cover_every_system_once_and_balance():
    sizes = [5, 1, 9, 3, 3, 7, 0, 2]
    for workers in (1, 2, 3, 8, 20):
        shares = leakage_batches.shares(sizes, workers)
        assert sorted(i for s in shares for i in s) == list(range(len(sizes)))
        assert len(shares) == min(workers, len(sizes)) and all(s == sorted(s) for s in shares)
        loads = [sum(sizes[i] for i in s) for s in shares]
        assert max(loads) - min(loads) <= max(sizes)


def test_the_default_threads_are_the_idle_cpus(monkeypatch):
    """One thread, and one more per CPU the load average leaves idle, at most MAX_WORKERS."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    for load, want in ((0.2, 4), (3.5, 3), (4.9, 2), (6.0, 1), (40.0, 1)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert leakage_batches.available_workers() == min(want, leakage_batches.MAX_WORKERS)
