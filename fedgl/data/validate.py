"""One check for every graph that enters a run, whichever loader (or user) built it.

:func:`validate_graph` checks a :class:`GraphData` before any work: tensor types and shapes,
finite features, labels in ``0..num_classes-1`` with ``2 <= num_classes <= num_nodes``, edge ids
in ``0..num_nodes-1``, boolean split masks of the right length with a non-empty training and test
split (the splits may overlap). :func:`validated` applies it to a loader's return value, so every
loader behind :func:`fedgl.data.datasets.load_dataset` (present or future) gets it.
:func:`check_public_split` adds the Planetoid public-split rule (the same number of training
nodes in every class), which catches label files mixed up across datasets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from fedgl.data.graph import GraphData
from fedgl.errors import DataError

#: more classes than this is a label file that is not a class label file
MAX_CLASSES = 100_000

F = TypeVar("F", bound=Callable[..., Any])


def _fail(source: str, problem: str, fix: str = "re-create or replace the file") -> DataError:
    return DataError(f"{source}: {problem}; {fix}")


def check_labels(labels: Any, num_nodes: int, source: str) -> int:
    """Labels are integers in ``0..C-1`` with ``2 <= C <= min(num_nodes, MAX_CLASSES)``; returns C.

    Call it before anything loops over the classes (a label of 10^9 would mean 10^9 classes).
    """
    y = torch.as_tensor(labels)
    if y.dim() != 1 or y.numel() != num_nodes:
        raise _fail(source, f"labels have shape {tuple(y.shape)}, expected ({num_nodes},)")
    if y.dtype.is_floating_point or y.dtype == torch.bool or y.dtype.is_complex:
        raise _fail(source, f"labels must be integers (got {y.dtype})")
    if num_nodes == 0:
        raise _fail(source, "the graph has no nodes", "use a graph with nodes")
    low, high = int(y.min()), int(y.max())
    if low < 0:
        raise _fail(source, f"a label is negative ({low}); labels must be 0..C-1")
    if high >= min(num_nodes, MAX_CLASSES):
        raise _fail(source, f"a label is {high}, but {num_nodes} nodes cannot have {high + 1} "
                    f"classes (at most {min(num_nodes, MAX_CLASSES)})")
    if high < 1:
        raise _fail(source, "every node has the same label; node classification needs at least "
                    "2 classes")
    return high + 1


def validate_graph(graph: GraphData, source: str) -> GraphData:
    """Raise a one-line :class:`DataError` naming ``source`` and the problem, else return ``graph``."""
    if not isinstance(graph, GraphData):
        raise DataError(f"{source}: expected a fedgl.GraphData, got {type(graph).__name__}; "
                        "build one with fedgl.from_pyg(data) or a loader")
    for name in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        if not isinstance(getattr(graph, name), torch.Tensor):
            raise _fail(source, f"{name} is a {type(getattr(graph, name)).__name__}, not a tensor",
                        "pass torch tensors")
    x = graph.x
    if x.dim() != 2:
        raise _fail(source, f"features x have shape {tuple(x.shape)}; expected [nodes, features]")
    if not x.dtype.is_floating_point:
        raise _fail(source, f"features x must be floating point (got {x.dtype})", "use x.float()")
    n = int(x.size(0))
    if n == 0 or x.size(1) == 0:
        raise _fail(source, f"features x have shape {tuple(x.shape)}; the graph needs nodes and "
                    "at least one feature")
    rows = max(1, (1 << 22) // int(x.size(1)))   # in row blocks: no x-sized boolean temporary
    if not all(bool(torch.isfinite(x[a:a + rows]).all()) for a in range(0, n, rows)):
        bad = int((~torch.isfinite(x)).any(dim=1).sum())
        raise _fail(source, f"features hold NaN or infinite values ({bad} of {n} nodes)",
                    "clean or impute the features first")
    classes = check_labels(graph.y, n, source)
    if not isinstance(graph.num_classes, int) or isinstance(graph.num_classes, bool):
        raise _fail(source, f"num_classes is {graph.num_classes!r}, not an int", "pass an int")
    if graph.num_classes < classes or graph.num_classes > min(n, MAX_CLASSES):
        raise _fail(source, f"num_classes is {graph.num_classes} but labels reach {classes - 1}",
                    "set num_classes to max label + 1")
    ei = graph.edge_index
    if ei.dim() != 2 or ei.size(0) != 2:
        raise _fail(source, f"edge_index has shape {tuple(ei.shape)}; expected [2, edges]")
    if ei.dtype.is_floating_point or ei.dtype == torch.bool:
        raise _fail(source, f"edge_index must hold integer node ids (got {ei.dtype})")
    if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise _fail(source, f"an edge names node {int(ei.max()) if int(ei.max()) >= n else int(ei.min())}"
                    f", outside 0..{n - 1}")
    masks = {}
    for split in ("train", "val", "test"):
        m = getattr(graph, f"{split}_mask")
        if m.dtype != torch.bool or m.shape != (n,):
            raise _fail(source, f"{split}_mask must be a boolean tensor of shape ({n},) (got "
                        f"{m.dtype}, {tuple(m.shape)})")
        masks[split] = m
    for split in ("train", "test"):
        if not bool(masks[split].any()):
            raise _fail(source, f"the {split} split is empty",
                        "the split files are truncated or the split is missing")
    return graph


def check_public_split(graph: GraphData, source: str) -> None:
    """Planetoid's public split trains on the same number of nodes of every class (20); a label
    file from another dataset or a truncated one breaks that."""
    counts = torch.bincount(graph.y[graph.train_mask], minlength=graph.num_classes)
    if int(counts.min()) != int(counts.max()):
        raise _fail(source, f"training labels per class are {counts.tolist()}, not equal as in the "
                    "public split (ind.*.y does not match ind.*.ally)",
                    "replace the files with an intact copy of the dataset")


def validated(loader: F) -> F:
    """Decorate a loader ``f(name, ...) -> GraphData`` so its result is validated."""
    @functools.wraps(loader)
    def wrapper(name: str, *args: Any, **kwargs: Any) -> GraphData:
        return validate_graph(loader(name, *args, **kwargs), f"dataset '{name}'")
    return wrapper  # type: ignore[return-value]
