"""PyG-compatible loaders over gnnscale's stages: a PyG script (homogeneous, or a typed graph's ``to_hetero``
script) changes its import line and nothing else::

    from gnnscale.loader import NeighborLoader, LinkNeighborLoader   # was: from torch_geometric.loader import ...

Both loaders run the same steps on their seeds (nodes, or the endpoints of seed edges and their negatives):

- sample (:mod:`~gnnscale.loader.sample`): the seeds' node-wise neighborhoods, keyed by ``(seed, epoch, step)``;
- fetch (:mod:`~gnnscale.loader.fetch`): the data's attributes sliced into a PyG ``Data`` batch (a typed graph's
  into a ``HeteroData``: :mod:`~gnnscale.loader.hetero_fetch`);
- copy (:mod:`~gnnscale.loader.stream`): ``prefetch`` batches ahead in a background thread, sent to ``device``
  there (:func:`gnnscale.batch_stream.batch_stream`, the trainer's stream).

The link loader draws its pairs first (:func:`gnnscale.sampling.negatives.batch_pairs`). The arguments both
take from PyG and torch's ``DataLoader`` are checked in :mod:`~gnnscale.loader.options`; the topology of a PyG
``Data``, and a NodeDataset as a ``Data`` (:func:`to_pyg_data`), are :mod:`~gnnscale.loader.data`'s; the
typed topology of a ``HeteroData``, its ``num_neighbors`` and ``input_nodes``, and a TypedDataset as a
``HeteroData`` (:func:`to_pyg_hetero_data`) are :mod:`~gnnscale.loader.hetero`'s.
"""

from gnnscale.loader.data import to_pyg_data
from gnnscale.loader.hetero import to_pyg_hetero_data
from gnnscale.loader.link import LinkNeighborLoader
from gnnscale.loader.node import NeighborLoader

__all__ = ["LinkNeighborLoader", "NeighborLoader", "to_pyg_data", "to_pyg_hetero_data"]
