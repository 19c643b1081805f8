"""What both loaders do with their seeds (nodes or edges): an epoch's order, its batches, and one batch
stream (:func:`gnnscale.batch_stream.batch_stream`, the trainer's too) that prepares them in a
background thread and copies them to the device there."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor
from torch_geometric.data import Data

from gnnscale.batch_stream import batch_stream
from gnnscale.devices import StreamCopy
from gnnscale.keys import STREAM_ORDER, derive_key
from gnnscale.loader.options import StreamOptions


class SeedLoader:
    """Iterates over batches of ``num_seeds`` seeds, ``options.batch_size`` each, one epoch per iteration.

    A loader says what a batch of seeds is (:meth:`_batch`, on the host); this class keys it by
    ``(seed, epoch, step)``, orders the seeds (shuffled by ``(seed, epoch)``), prepares ``prefetch``
    batches ahead and sends each to ``options.device`` (:class:`~gnnscale.devices.StreamCopy`).
    """

    def __init__(self, num_seeds: int, options: StreamOptions) -> None:
        self.num_seeds, self.options = num_seeds, options
        self.epoch = 0  # epochs started: each iteration over the loader is the next epoch

    @property
    def seed(self) -> int:
        return self.options.seed

    @property
    def device(self) -> torch.device:
        return self.options.device

    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    def batch(self, index: Tensor, key: int) -> Data:
        """The batch of the seeds at positions ``index`` sampled under ``key``, transformed, on the host
        (iterating sends it to ``device``)."""
        data = self._batch(index, key)
        return data if self.options.transform is None else self.options.transform(data)

    def _batch(self, index: Tensor, key: int) -> Data:
        """The loader's own: the batch of the seeds at positions ``index`` under ``key``, before ``transform``."""
        raise NotImplementedError

    def __len__(self) -> int:
        n, size = self.num_seeds, self.options.batch_size
        return n // size if self.options.drop_last else -(-n // size)

    def __iter__(self) -> Iterator[Data]:
        epoch = self.epoch
        self.epoch += 1
        order = torch.arange(self.num_seeds)
        if self.options.shuffle:
            gen = torch.Generator().manual_seed(derive_key(self.seed, epoch, 0, 0, STREAM_ORDER))
            order = torch.randperm(order.numel(), generator=gen)
        batches = order.split(self.options.batch_size)[: len(self)]
        return self._stream(batches, epoch)

    def _stream(self, batches: tuple[Tensor, ...], epoch: int) -> Iterator[Data]:
        # A generator, so that leaving the loop early closes the background stage.
        copy = StreamCopy(self.options.device, pin=self.options.pin_memory)

        def prepare(steps: range) -> list[Data]:
            return [self.batch(batches[step], derive_key(self.seed, epoch, step)) for step in steps]

        yield from batch_stream(prepare, len(batches), copy=copy, map_tensors=Data.apply, depth=self.options.prefetch)
