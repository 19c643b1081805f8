"""PyG models in the trainer (``fit(..., inputs="pyg")``): every prepared batch as PyG's node-wise batch.

The layouts sample layered blocks (the same in every layout and worker count, see
:mod:`gnnscale.train.layouts`). The PyG batch is the node-wise subgraph inside them
(:func:`~gnnscale.sampling.nodewise.nodewise_from_blocks`): exactly what gnnscale's ``NeighborLoader``
yields for the same seeds and key, with PyG's conventions (``x``, ``edge_index`` in local ids, the
``batch_size`` seeds first, ``n_id``, ``num_sampled_nodes``, ``num_sampled_edges``) and ``y`` holding
the seeds' labels. It is made in the loading stage, beside the training step. The features fetched are
those of the blocks' sources, a few more rows than the node-wise batch keeps (the seeds' and earlier
hops' neighbors drawn again at later hops).

The node-wise subgraph is drawn from the blocks by host kernels: blocks sampled on a GPU come to the host
once (one wait for all their copies), and the rows are selected where the fetch put them (on the GPU
behind a device cache). The copy stage then sends what is on the host.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch_geometric.data import Data

from gnnscale.devices import host_copies
from gnnscale.sampling import Block
from gnnscale.sampling.nodewise import nodewise_from_blocks
from gnnscale.sampling.pyg import to_data
from gnnscale.train.inputs import seed_torch_for_step
from gnnscale.train.steps import Batch


def pyg_batch(batch: Batch) -> Data:
    """The PyG batch of a prepared (data-parallel) batch: its blocks' node-wise subgraph, the features of
    its nodes, and the labels of its seeds."""
    sample, rows = nodewise_from_blocks(host_blocks(batch.blocks))
    return to_data(sample, batch.x[rows.to(batch.x.device)], batch.y)


def host_blocks(blocks: list[Block]) -> list[Block]:
    """``blocks`` with the tensors the node-wise subgraph reads on the host (:func:`host_copies`: one wait)."""
    tensors = host_copies([t for b in blocks for t in (b.indptr, b.indices, b.src_ids)])
    return [Block(indptr=indptr, indices=indices, src_ids=src_ids, num_dst=b.num_dst)
            for b, indptr, indices, src_ids in zip(blocks, tensors[0::3], tensors[1::3], tensors[2::3], strict=True)]


class PygInputs:
    """``model(x, edge_index)[:batch_size]``: a PyG model's logits of the seeds."""

    name = "pyg"

    def convert(self, batch: Batch) -> Data:
        return pyg_batch(batch)

    def logits(self, model: nn.Module, data: Data, *, dropout_key: int | None) -> Tensor:
        seed_torch_for_step(dropout_key)
        out = model(data.x, data.edge_index)
        if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] < data.batch_size:
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(f"model: expected model(x, edge_index) to return logits [num_nodes, num_classes] "
                             f"(the {data.batch_size} seeds first), got {got}")
        return out[:data.batch_size]
