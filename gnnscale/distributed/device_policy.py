"""The device policy of a worker: from the settings, where it trains, where its training batches are sampled,
whether host rows are pinned, how many feature rows the device holds, and which process group the training
step's collectives run on. Every other module reads these decisions; none makes them again.

- **Device**: ``--device`` resolved on this worker (:func:`gnnscale.devices.resolve_device`: under torchrun,
  ``cuda`` is ``cuda:LOCAL_RANK`` modulo the GPUs visible).
- **Sampling place**: ``--sample-on host|device|auto``. ``auto`` samples on the training GPU with a sampler
  that runs there (its spec says so) when what that sampler keeps on the GPU (its topology or operator and
  work arrays: the spec's ``device_bytes``) takes at most :data:`AUTO_TOPOLOGY_SHARE` of the GPU's free
  memory; only a layout that can sample on the device passes those bytes (the whole topology's, or none for a
  1.5D worker, whose rows come from its process column per hop). Workers agree (one collective), so that all
  sample alike.
- **Pinning**: on a GPU, host feature rows are gathered straight into pinned memory, so the copy stage sends
  them without a second host copy.
- **The step's group** (:func:`step_comm`): the collectives of the training step, the gradients' all-reduce and
  split parallelism's shuffles (partial sums, source rows and their gradients), run on a NCCL group of their
  own when every worker of a machine has a GPU of its own, else on the default (gloo) group through host
  memory. The loading stage's collectives stay on the loader's gloo group, on host tensors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from gnnscale.distributed.comm import Comm

# --sample-on auto samples on a GPU when what the sampler keeps there (topology, work arrays) takes at most this
# share of its free memory: the rest is for the model's activations and the batches in flight.
AUTO_TOPOLOGY_SHARE = 0.5
SAMPLE_ON = ("auto", "host", "device")


@dataclass(frozen=True, slots=True, kw_only=True)
class DevicePolicy:
    """Where one worker's data and work live.

    Args:
        device: where the model trains.
        sample_on_device: the training sampler runs on ``device`` (its blocks come out there).
        pin_rows: host feature rows are gathered into pinned memory (training on a GPU).
        gpu_cache_fraction: share of all nodes whose feature rows ``device`` holds (the highest in-degree ones;
            under split parallelism, of the worker's own rows, GSplit's per-GPU cache).
    """

    device: torch.device
    sample_on_device: bool
    pin_rows: bool
    gpu_cache_fraction: float

    @property
    def rows_on_device(self) -> bool:
        """Whether a device feature cache stands in front of the store: rows are held on the device, or the
        sampler's ids are there (their rows are gathered through the cache)."""
        return self.gpu_cache_fraction > 0 or self.sample_on_device


# Everything on the host: the CPU trains, samples and holds every row (what a test or a benchmark without the
# run's settings builds a layout with).
HOST = DevicePolicy(device=torch.device("cpu"), sample_on_device=False, pin_rows=False, gpu_cache_fraction=0.0)


def fits_on_device(nbytes: int, device: torch.device) -> bool:
    """Whether ``nbytes`` take at most :data:`AUTO_TOPOLOGY_SHARE` of ``device``'s free memory (reads the GPU's
    free memory)."""
    free, _ = torch.cuda.mem_get_info(device)
    return nbytes <= AUTO_TOPOLOGY_SHARE * free


def samples_on_device(sample_on: str, device: torch.device, device_bytes: int | None) -> bool:
    """Whether this worker's training sampler runs on ``device`` (``sample_on``, ``auto`` resolved).

    Args:
        sample_on: ``"host"``, ``"device"`` or ``"auto"``.
        device: the training device.
        device_bytes: what the training sampler would keep on ``device`` (its spec's ``device_bytes`` of the
            topology it samples; 0 for one whose rows are fetched per hop), None where this worker samples on
            the host whatever ``sample_on`` says (a sampler with no device build, a layout that samples on the
            host).
    """
    if sample_on not in SAMPLE_ON:
        raise ValueError(f"sample_on: expected one of {SAMPLE_ON}, got {sample_on!r}")
    if device_bytes is None:
        return False
    if sample_on != "auto":
        return sample_on == "device"
    return device.type == "cuda" and fits_on_device(device_bytes, device)


def decide(device: torch.device, *, sample_on: str, device_bytes: int | None, gpu_cache_fraction: float,
           comm: Comm) -> DevicePolicy:
    """This worker's policy (``device_bytes``: see :func:`samples_on_device`). Collective on ``comm`` (one
    ``"setup"`` round): every worker samples where all of them can, so that their batches come out alike."""
    mine = samples_on_device(sample_on, device, device_bytes)
    # Collective: the sampling place every worker agrees on (any worker that cannot keeps all on the host).
    on_device = comm.all_reduce_max_int(0 if mine else 1, "setup") == 0
    return DevicePolicy(device=device, sample_on_device=on_device, pin_rows=device.type == "cuda",
                        gpu_cache_fraction=gpu_cache_fraction)


def use_device(device: torch.device) -> None:
    """Make ``device`` this worker's current GPU (where its streams, events and NCCL run); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def has_own_gpu(device: torch.device) -> bool:
    """Whether this worker's GPU is its own on this machine: ``cuda:LOCAL_RANK`` with no more workers here than
    GPUs (``--device cuda:0`` under torchrun puts every worker of a machine on one GPU, which NCCL refuses)."""
    if device.type != "cuda" or not dist.is_nccl_available():
        return False
    workers_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return workers_here <= torch.cuda.device_count() and device.index == local_rank


def step_comm(comm: Comm, device: torch.device) -> Comm:
    """The Comm of the training step's collectives, for a model on ``device``: the gradients' all-reduce and split
    parallelism's shuffles, which run on the training thread one after the other (one group serves both).

    With a GPU of its own on every worker (:func:`has_own_gpu`), a second process group on NCCL: gradients and
    shuffled rows stay on the GPUs while the host-side exchanges (sampling, feature fetch, set-up) stay on
    ``comm``'s gloo. Otherwise (the CPU, workers sharing a GPU, no NCCL) ``comm`` itself, through host copies.
    Its rounds are counted in ``comm``'s accounting. Collective on ``comm`` (one ``"setup"`` round, then the
    group's creation) when there are several workers.
    """
    if comm.world_size == 1 or comm.device.type == "cuda":
        return comm  # nothing to reduce, or the default group is already on the GPUs
    # Collective: every worker creates the group or none does, so all must agree that each has its own GPU.
    if comm.all_reduce_max_int(0 if has_own_gpu(device) else 1, "setup"):
        return comm
    return comm.new_group(backend="nccl", device=device, stats=comm.stats)
