"""Relational layers over one :class:`~gnnscale.sampling.typed.TypedBlock`: R-GCN, R-SAGE and R-GAT.

Every layer maps ``(block, x_src [num_src, in]) -> [num_dst, out]``. ``x_src`` holds one row per source of
the block, every node type in the same width (a typed model's input projections and embeddings put them
there), destinations first (``src_ids[:num_dst]``, the Block convention), so a destination's own row is
``x_src[p]`` for its position ``p``. Relation ``r`` contributes to the block's destinations of its
destination type (``block.relations[r].dst``), and the contributions are summed: PyG's
``HeteroConv(aggr="sum")`` and ``to_hetero(..., aggr="sum")``, and ``RGCNConv``'s sum over relations. A
destination of a type that no relation enters gets no term: 0 from R-SAGE and R-GAT, its root term from R-GCN.

**Aggregation.** R-GCN and R-SAGE take every relation's neighbor means and the destinations' own rows from one
function, :func:`relation_means`, in one pass whose backward writes each source's gradient once: the numba
kernels for float32/float64 CPU tensors (:func:`~gnnscale.nn.functional.csr_sum`), torch's segment sums
elsewhere (CUDA), ``kernels`` as the homogeneous layers (``"auto"``, ``"numba"``, ``"torch"``). R-GAT's
softmax and weighted sum are the attention kernel without a self edge
(:func:`~gnnscale.nn.functional.csr_attention` and its twin :func:`~gnnscale.nn.torch_ops.attention`).

**Cost.** Per relation a layer touches the relation's edges and destinations and, for R-GAT, the sources of
the relation's source type; nothing assumes a small block, so a whole-graph block (layer-wise inference)
runs the same code. Relations without a destination in the block (in the last layer, those into other
types than the seeds') are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from gnnscale.graph.typed import Relation, parse_relation
from gnnscale.nn import torch_ops
from gnnscale.nn.functional import check_dropout_key, csr_attention, csr_sum, resolve_kernels, site_key
from gnnscale.nn.layers import GATConv, SAGEConv, block_diagonal
from gnnscale.sampling.typed import RelationBlock, TypedBlock


def _csr_mean(indptr: Tensor, indices: Tensor, x_src: Tensor, kernels: str) -> Tensor:
    """Row ``i``'s mean of ``x_src[indices[indptr[i]:indptr[i + 1]]]`` (0 for a row without edges)."""
    num_rows = indptr.shape[0] - 1
    if resolve_kernels(kernels, x_src) == "numba":
        return csr_sum(indptr, indices, num_rows, x_src, norm="mean")
    total = torch_ops.segment_sum(indptr, indices, num_rows, x_src)
    return total / indptr.diff().clamp(min=1).to(total.dtype).unsqueeze(1)


def relation_means(block: TypedBlock, x_src: Tensor, own: Tensor, *, kernels: str = "auto") -> Tensor:
    """Every relation's destinations' mean over their in-edges by the relation (0 without any), relation after
    relation, then the rows ``x_src[own]``, as one tensor from one aggregation over all of them (the relations'
    CSRs end to end, each row of ``own`` a row of one edge, whose mean is the row itself): the numba kernel for
    float32/float64 CPU tensors under ``"auto"``, torch's segment sums elsewhere (``kernels``:
    :func:`~gnnscale.nn.functional.resolve_kernels`). One pass forward and, above all, one backward: the
    gradient of every source row is written once, where a pass per relation writes a [num_src, d] gradient per
    relation (and indexing the own rows a zero-filled one) for autograd to add up.

    Shapes:
        x_src float [num_src, d]; own int64 [m] -> [sum_r len(block.relations[r].dst) + m, d], relation
        r's rows in ``block.relations[r].dst``'s order.
    """
    device = x_src.device
    starts, indices, at = [], [], 0
    for rel in block.relations:
        starts.append(rel.indptr[:-1] + at)
        indices.append(rel.indices)
        at += rel.num_edges
    starts.append(torch.arange(at, at + own.shape[0], dtype=torch.int64, device=device))
    indices.append(own)
    at += own.shape[0]
    indptr = torch.cat([*starts, torch.full((1,), at, dtype=torch.int64, device=device)])
    return _csr_mean(indptr, torch.cat(indices), x_src, kernels)


def destination_positions(block: TypedBlock, relations: Sequence[Relation]) -> dict[str, Tensor]:
    """The block's destinations by node type: ``{type: int64 positions among the destinations}`` for every
    type some relation enters (each such relation's ``dst`` lists them all). They are the next block's
    sources of that type (its sources start with this block's destinations)."""
    return {rel.dst: part.dst for rel, part in zip(relations, block.relations)}


def check_typed_input(block: TypedBlock, x_src: Tensor, in_dim: int, num_relations: int) -> None:
    """Raise naming the argument unless ``block`` is a TypedBlock of ``num_relations`` relations and ``x_src``
    is [block.num_src, in_dim]."""
    if not isinstance(block, TypedBlock):
        raise TypeError(f"block: expected a TypedBlock, got {type(block).__name__}")
    if len(block.relations) != num_relations:
        raise ValueError(f"block: expected {num_relations} relations (the layer's), got {len(block.relations)}")
    if x_src.dim() != 2 or x_src.shape[0] != block.num_src or x_src.shape[1] != in_dim:
        raise ValueError(f"x_src: expected shape [num_src={block.num_src}, in_dim={in_dim}], got {list(x_src.shape)}")


def _relations(relations: Sequence) -> tuple[Relation, ...]:
    out = tuple(parse_relation(r) for r in relations)
    if not out or len(set(out)) != len(out):
        raise ValueError(f"relations: expected one or more distinct relations, got {[str(r) for r in out]}")
    return out


def _glorot(t: Tensor) -> None:
    """PyG's ``glorot``: uniform in +-sqrt(6 / (fan_in + fan_out)) over the last two dimensions."""
    bound = math.sqrt(6.0 / (t.shape[-2] + t.shape[-1]))
    nn.init.uniform_(t, -bound, bound)


class RGCNConv(nn.Module):
    """R-GCN layer (Schlichtkrull et al.): ``out_i = x_i W_root + b + sum_r mean_{j in N_r(i)} x_j W_r``.

    The same parameters as PyG's ``RGCNConv(in_dim, out_dim, num_relations, num_bases, aggr="mean")``:
    ``weight`` [R, in, out], or with ``num_bases`` B the bases ``weight`` [B, in, out] and ``comp`` [R, B]
    (``W_r = sum_b comp[r, b] weight[b]``, the basis decomposition); ``root`` [in, out] shared by every
    node type; ``bias`` [out]. Glorot initialisation, zero bias, as PyG. Aggregates first (each relation's
    mean over ``in`` columns, then one product over its destinations).

    Args:
        in_dim, out_dim: feature sizes.
        num_relations: R, the relations of the blocks (``TypedBlock.relations``, in that order).
        num_bases: B bases shared by the relations, or None (the default: one weight per relation).
        bias: add a learnable bias. Default True.
        kernels: ``"auto"``, ``"numba"`` or ``"torch"`` (:func:`relation_means`). Default ``"auto"``.

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, num_relations: int, *, num_bases: int | None = None,
                 bias: bool = True, kernels: str = "auto") -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.num_relations, self.num_bases = in_dim, out_dim, num_relations, num_bases
        self.kernels = kernels
        if num_bases is None:
            self.weight = nn.Parameter(torch.empty(num_relations, in_dim, out_dim))
            self.comp = None
        else:
            self.weight = nn.Parameter(torch.empty(num_bases, in_dim, out_dim))
            self.comp = nn.Parameter(torch.empty(num_relations, num_bases))
        self.root = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(out_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for p in (self.weight, self.comp, self.root):
            if p is not None:
                _glorot(p)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def relation_weights(self) -> Tensor:
        """[R, in, out]: every relation's weight (combined from the bases under a basis decomposition)."""
        if self.comp is None:
            return self.weight
        return (self.comp @ self.weight.view(self.num_bases, -1)).view(self.num_relations, self.in_dim, self.out_dim)

    def forward(self, block: TypedBlock, x_src: Tensor) -> Tensor:
        check_typed_input(block, x_src, self.in_dim, self.num_relations)
        own = torch.arange(block.num_dst, dtype=torch.int64, device=x_src.device)
        *means, x_dst = relation_means(block, x_src, own, kernels=self.kernels).split(
            [rel.dst.shape[0] for rel in block.relations] + [block.num_dst])
        out = x_dst @ self.root
        if self.bias is not None:
            out = out + self.bias
        weights = self.relation_weights()
        for r, (rel, mean) in enumerate(zip(block.relations, means)):
            if rel.dst.shape[0]:
                # In place: index_add_'s backward needs neither out nor its old value, so no copy per relation.
                # Under autocast the product is half and out (root plus float32 bias) float: sum in out's dtype.
                out.index_add_(0, rel.dst, (mean @ weights[r]).to(out.dtype))
        return out

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, num_relations={self.num_relations}, num_bases={self.num_bases}"


class RSAGEConv(nn.Module):
    """R-SAGE: a GraphSAGE layer per relation, summed per destination (PyG's ``to_hetero(GraphSAGE,
    aggr="sum")``): ``out_i = sum_r lin_l^r(mean_{j in N_r(i)} x_j) + lin_r^r(x_i)``.

    ``convs[str(relation)]`` holds relation r's :class:`~gnnscale.nn.layers.SAGEConv` parameters (``lin_l``
    with bias, ``lin_r`` without), keyed as PyG's ``HeteroConv`` keys its convs (``"src__name__dst"``).

    Args:
        in_dim, out_dim: feature sizes.
        relations: the relations of the blocks, in their order (Relations, ``(src, name, dst)`` tuples or
            ``"src__name__dst"`` strings).
        bias: a learnable bias per relation (in its ``lin_l``). Default True.
        kernels: ``"auto"``, ``"numba"`` or ``"torch"`` (:func:`relation_means`). Default ``"auto"``.

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, relations: Sequence, *, bias: bool = True,
                 kernels: str = "auto") -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.kernels = in_dim, out_dim, kernels
        self.relations = _relations(relations)
        self.convs = nn.ModuleDict({str(rel): SAGEConv(in_dim, out_dim, bias, backend=kernels)
                                    for rel in self.relations})

    def forward(self, block: TypedBlock, x_src: Tensor) -> Tensor:
        check_typed_input(block, x_src, self.in_dim, len(self.relations))
        out = x_src.new_zeros(block.num_dst, self.out_dim)
        sizes = [rel.dst.shape[0] for rel in block.relations]
        own = torch.cat([rel.dst for rel in block.relations])  # each relation's destinations' own rows
        stacked = relation_means(block, x_src, own, kernels=self.kernels).split(sizes + sizes)
        for conv, rel, mean, x_dst in zip(self.convs.values(), block.relations, stacked, stacked[len(sizes):]):
            if rel.dst.shape[0]:
                out.index_add_(0, rel.dst, (conv.lin_l(mean) + conv.lin_r(x_dst)).to(out.dtype))
        return out

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, relations={len(self.relations)}"


class RGATConv(nn.Module):
    """R-GAT: a GAT layer per relation, summed per destination (PyG's ``to_hetero(GAT, aggr="sum")``, MLPerf's
    R-GAT). Relation r's layer is PyG's ``GATConv(in_dim, out_dim, heads, add_self_loops=False)``: one weight
    ``lin`` for its sources and destinations, ``z = lin(x)``, per head
    ``alpha_ij = softmax_{j in N_r(i)}(LeakyReLU(att_src . z_j + att_dst . z_i))`` over the relation's
    in-edges only (a source type is not the destination type, so there is no self edge; a destination
    without in-edges by r gets 0), ``sum_j alpha_ij z_j``, heads concatenated or averaged, plus its bias.

    ``convs[str(relation)]`` holds relation r's :class:`~gnnscale.nn.layers.GATConv` parameters (``lin``,
    ``att_src``, ``att_dst``, ``bias``; GAT's initialisation), keyed as PyG's ``HeteroConv`` keys its convs.
    Each relation transforms only the sources of its source type: :meth:`forward` takes where they are.

    Args:
        in_dim: input feature size.
        out_dim: features per head.
        heads: attention heads of every relation.
        relations: the relations of the blocks, in their order (as :class:`RSAGEConv`).
        concat: concatenate the heads (``heads * out_dim`` features) or average them (``out_dim``). Default True.
        negative_slope: LeakyReLU slope. Default 0.2.
        attn_dropout: dropout on the attention weights in training (keyed, per relation). Default 0.0.
        bias: a learnable bias per relation. Default True.
        kernels: ``"auto"``, ``"numba"`` or ``"torch"``. Default ``"auto"``.

    Shapes:
        x_src float [num_src, in_dim] -> float [num_dst, heads * out_dim] (concat) or [num_dst, out_dim].
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int, relations: Sequence, *, concat: bool = True,
                 negative_slope: float = 0.2, attn_dropout: float = 0.0, bias: bool = True,
                 kernels: str = "auto") -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.heads, self.concat = in_dim, out_dim, heads, concat
        self.negative_slope, self.attn_dropout, self.kernels = negative_slope, attn_dropout, kernels
        self.relations = _relations(relations)
        self.convs = nn.ModuleDict({str(rel): GATConv(in_dim, out_dim, heads, concat, negative_slope, attn_dropout,
                                                      bias, backend=kernels) for rel in self.relations})

    @property
    def out_width(self) -> int:
        return self.heads * self.out_dim if self.concat else self.out_dim

    def forward(self, block: TypedBlock, x_src: Tensor, src_positions: Mapping[str, Tensor], *,
                dropout_key: int | None = None) -> Tensor:
        """Args:
            block, x_src: as the other layers.
            src_positions: ``{node type: int64 positions}`` of the block's sources of every type that some
                relation leaves: all of them (a typed model passes its input's positions to the first layer,
                :func:`destination_positions` of the previous block to the others).
            dropout_key: the layer's attention-dropout key (training with ``attn_dropout > 0``); None draws one.
        """
        check_typed_input(block, x_src, self.in_dim, len(self.relations))
        missing = sorted({rel.src for rel in self.relations} - set(src_positions))
        if missing:
            raise ValueError(f"src_positions: expected the sources of every type a relation leaves, missing "
                             f"{', '.join(missing)}")
        p = self.attn_dropout if self.training else 0.0
        key = check_dropout_key(dropout_key) if p > 0 else 0
        rank = _ranks_within_type(src_positions, block.num_src, x_src.device)
        rows: dict[str, Tensor] = {}  # the sources of each type, gathered once for all relations leaving it
        # On the host each relation gathers and transforms only the sources it reads: the input layer's sources
        # of a type can be many times one relation's (IGB-H's 1M papers, fanouts 5,5,5: over a million), and each
        # relation leaving the type would hold its own [sources, heads * out_dim] transform of them all. A device
        # keeps whole types: finding the sources read is a sync there.
        compact = resolve_kernels(self.kernels, x_src) == "numba"
        out = x_src.new_zeros(block.num_dst, self.out_width)
        for r, (conv, relation, rel) in enumerate(zip(self.convs.values(), self.relations, block.relations)):
            if not rel.dst.shape[0]:
                continue
            if compact:
                used, indices = torch.unique(rel.indices, return_inverse=True)
                if bool((rank[used] < 0).any()):
                    raise ValueError(f"block: relation {relation} reads sources missing from src_positions")
                sources = x_src[used]
            else:
                if relation.src not in rows:
                    rows[relation.src] = x_src[src_positions[relation.src]]
                sources, indices = rows[relation.src], rank[rel.indices]
            term = self._relation(conv, rel, sources, x_src[rel.dst], indices, dropout=p, key=site_key(key, r))
            out.index_add_(0, rel.dst, term.to(out.dtype))  # a half term under autocast
        return out

    def _relation(self, conv: GATConv, rel: RelationBlock, x_sources: Tensor, x_dst: Tensor, indices: Tensor, *,
                  dropout: float, key: int) -> Tensor:
        """One relation's GAT over its source type's rows ``x_sources`` (``indices`` into them) and its
        destinations' rows ``x_dst``: [len(rel.dst), out_width], bias included."""
        heads, width = self.heads, self.out_dim
        z = conv.lin(x_sources)                                        # [S_type, H * C]
        score_src = z @ block_diagonal(conv.att_src)                   # [S_type, H]
        score_dst = conv.lin(x_dst) @ block_diagonal(conv.att_dst)     # [n, H]
        z = z.view(-1, heads, width)
        options = dict(negative_slope=self.negative_slope, dropout=dropout, key=key, self_edge=False)
        if resolve_kernels(self.kernels, z) == "numba":
            out = csr_attention(rel.indptr, indices, z, score_src, score_dst, **options)
        else:
            out = torch_ops.attention(rel.indptr, indices, z, score_src, score_dst, **options)
        out = out.reshape(-1, heads * width) if self.concat else out.mean(dim=1)
        return out if conv.bias is None else out + conv.bias

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, heads={self.heads}, concat={self.concat}, relations={len(self.relations)}"


def _ranks_within_type(positions: Mapping[str, Tensor], num_src: int, device: torch.device) -> Tensor:
    """int64 [num_src]: every source's row among the sources of its type (its index in its type's positions);
    -1 for a source of a type not listed, which an index then refuses rather than reading another row."""
    rank = torch.full((num_src,), -1, dtype=torch.int64, device=device)
    for pos in positions.values():
        rank[pos] = torch.arange(pos.shape[0], device=device)
    return rank
