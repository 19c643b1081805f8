"""The arguments both loaders take from PyG and torch's ``DataLoader``, checked once: PyG's options that
gnnscale does not implement, the worker-process options it ignores, the ``DataLoader`` half (batches,
order, seed, background stage, device) as one :class:`StreamOptions`, and PyG's ``input_nodes`` ids
(:func:`input_node_ids`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnscale.devices import resolve_device

# torch DataLoader options about worker processes: accepted, with one note, and ignored (sampling runs
# in numba threads of this process; the background stage is ``prefetch``). pin_memory_device is
# deprecated in torch (the current accelerator is used): pin_memory and device say it all.
IGNORED_LOADER_OPTIONS = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory_device",
                          "worker_init_fn", "multiprocessing_context", "timeout", "in_order")
# PyG options gnnscale does not implement, with the only value it accepts (PyG's default).
DEFAULT_ONLY = {"input_time": None, "disjoint": False, "temporal_strategy": "uniform", "time_attr": None,
                "weight_attr": None, "transform_sampler_output": None, "neighbor_sampler": None, "directed": True}
_noted: set[str] = set()


def _note_ignored(loader: str, names: list[str]) -> None:
    """One warning per process and option: a training script builds a loader per epoch or per split."""
    new = [n for n in names if n not in _noted]
    if new:
        _noted.update(new)
        warnings.warn(f"{loader}: {', '.join(new)} ignored: gnnscale samples in numba threads of this "
                      f"process and prepares batches ahead with prefetch=<batches> instead of worker processes",
                      stacklevel=4)


def _note_no_pinning(loader: str) -> None:
    """torch's DataLoader warns and goes on where pin_memory=True meets no accelerator; so do the loaders
    (once per process): a script written for a GPU machine still runs on a CPU-only one, unchanged."""
    if "pin_memory" not in _noted:
        _noted.add("pin_memory")
        warnings.warn(f"{loader}: pin_memory=True ignored: no CUDA device here, so batches stay in ordinary "
                      "memory (as torch's DataLoader does)", stacklevel=4)


def check_pyg_options(loader: str, defaults_only: dict[str, object], subgraph_type, loader_options: dict) -> None:
    """Refuse what gnnscale's loaders do not implement, note once what they ignore.

    Args:
        loader: the class name the errors and notes speak of.
        defaults_only: name -> value of PyG's options that only take their default (:data:`DEFAULT_ONLY`).
        subgraph_type: PyG's ``SubgraphType`` or its name; ``"directional"`` only.
        loader_options: the other keyword arguments: :data:`IGNORED_LOADER_OPTIONS` or a ``TypeError``.
    """
    for name, value in defaults_only.items():
        default = DEFAULT_ONLY[name]
        if value is not default and not (type(value) is type(default) and value == default):
            raise ValueError(f"{name}: gnnscale's NeighborLoader supports only {default!r} (PyG's default), "
                             f"got {value!r}")
    unknown = sorted(set(loader_options) - set(IGNORED_LOADER_OPTIONS))
    if unknown:
        raise TypeError(f"{loader}: unexpected keyword arguments {unknown}")
    _note_ignored(loader, [n for n in IGNORED_LOADER_OPTIONS if n in loader_options])
    subgraph_type = getattr(subgraph_type, "value", subgraph_type)  # PyG's SubgraphType enum or its name
    if subgraph_type != "directional":
        raise ValueError(f"subgraph_type: gnnscale's {loader} supports only 'directional', got {subgraph_type!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions:
    """How a loader's seeds (nodes or edges) become batches, and where the batches go.

    Args:
        batch_size: seeds per batch (>= 1).
        shuffle: a new order of the seeds every epoch, keyed by ``(seed, epoch)``.
        drop_last: leave out the last batch when it is short.
        seed: fixes every random choice (>= 0).
        prefetch: batches prepared ahead by the background thread (0: on the calling thread).
        transform: applied to every batch on the host, before the copy; None: none.
        device: where the yielded batches' tensors are.
        pin_memory: pin the host batches (where CUDA exists; implied by a CUDA ``device``).
    """

    batch_size: int
    shuffle: bool
    drop_last: bool
    seed: int
    prefetch: int
    transform: Callable | None
    device: torch.device
    pin_memory: bool


def stream_options(loader: str, *, batch_size, shuffle, drop_last, seed, prefetch, generator, transform, device,
                   pin_memory) -> StreamOptions:
    """The checked :class:`StreamOptions` of a loader's arguments (``loader``: the class name its note speaks of)."""
    for name, value, low in (("batch_size", batch_size, 1), ("prefetch", prefetch, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
    if transform is not None and not callable(transform):
        raise TypeError(f"transform: expected a callable or None, got {type(transform).__name__}")
    if not isinstance(pin_memory, bool):
        raise TypeError(f"pin_memory: expected True or False, got {pin_memory!r}")
    device = resolve_device(device)
    if pin_memory and not torch.cuda.is_available():
        _note_no_pinning(loader)
    return StreamOptions(batch_size=batch_size, shuffle=bool(shuffle), drop_last=bool(drop_last),
                         seed=_resolve_seed(seed, generator), prefetch=prefetch, transform=transform, device=device,
                         pin_memory=pin_memory)


def _resolve_seed(seed, generator) -> int:
    if seed is not None:
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed: expected an int >= 0 or None, got {seed!r}")
        return int(seed)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    # Drawn once: the loader's epochs then follow from it, as a DataLoader's from its generator.
    return int(torch.randint(0, 2**62, (), generator=generator))


def input_node_ids(input_nodes, num_nodes: int, nodes: str | None = None) -> tuple[Tensor, Tensor | None]:
    """The seed ids of PyG's ``input_nodes`` (int64, unique, in ``[0, num_nodes)``) and, for a mask, PyG's
    ``input_id`` source (node ids); None (every node), an int tensor, array or list, or a bool mask.
    ``nodes`` names the nodes in the errors (a typed graph's ``"the paper nodes"``)."""
    of = "" if nodes is None else f" ({nodes})"
    if input_nodes is None:
        return torch.arange(num_nodes), None
    if isinstance(input_nodes, np.ndarray):
        input_nodes = torch.from_numpy(input_nodes)
    elif not isinstance(input_nodes, Tensor):
        input_nodes = torch.as_tensor(input_nodes)
    if input_nodes.dim() != 1:
        raise ValueError(f"input_nodes: expected a 1-D tensor, got shape {tuple(input_nodes.shape)}")
    mask = input_nodes.dtype == torch.bool
    if mask:
        if input_nodes.numel() != num_nodes:
            raise ValueError(f"input_nodes: a bool mask needs one entry per node ({num_nodes}{of}), got "
                             f"{input_nodes.numel()}")
        input_nodes = input_nodes.nonzero().view(-1)
    elif input_nodes.dtype.is_floating_point or input_nodes.dtype.is_complex:
        raise TypeError(f"input_nodes: expected an integer tensor of node ids or a bool mask, got {input_nodes.dtype}")
    input_nodes = input_nodes.cpu().to(torch.int64)
    if input_nodes.numel() == 0:
        raise ValueError("input_nodes: expected at least one node, got none"
                         + (" (the mask is all False)" if mask else ""))
    lo, hi = int(input_nodes.min()), int(input_nodes.max())
    if lo < 0 or hi >= num_nodes:
        raise ValueError(f"input_nodes: node ids must lie in [0, {num_nodes}){of}, found {lo if lo < 0 else hi}")
    if torch.unique(input_nodes).numel() != input_nodes.numel():
        raise ValueError("input_nodes: expected unique node ids (a batch samples its seeds as one set), got repeats")
    return input_nodes, input_nodes if mask else None
