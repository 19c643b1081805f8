"""R-GCN, R-SAGE and R-GAT over typed blocks (input layer first), their config and their input.

A model with ``num_layers`` layers consumes ``num_layers`` :class:`~gnnscale.sampling.typed.TypedBlock`\\ s, as
:func:`~gnnscale.sampling.typed.sample_typed_blocks` returns them, and is called as the built-in models are:
``model(blocks, x, dropout_key=k)`` -> the logits of ``blocks[-1]``'s destinations (the seeds, all of the
target type), float [blocks[-1].num_dst, num_classes].

**Input.** ``x`` is a :class:`TypedInput`: the first block's sources by node type, each type's positions
among ``blocks[0].src_ids`` with its feature rows (a type with features) or its local ids (a type without,
the rows of its learnable embedding). Per type because that is how the data is stored and fetched: every
type has its own feature store and width, and a type without features has nothing to fetch at all, only ids.
The model turns them into one tensor: a type with features through its input projection (a Linear to the
model's width), a type without through its embedding (as DGL's and PyG's R-GCN examples on ogbn-mag do),
each row put at its position. From there every layer reads one [num_src, width] tensor, which lets a
relation index its sources by their position in the block. :func:`typed_input` builds it from in-memory
features, :func:`sources_by_type` gives a fetch stage the positions and local ids of each type.

**Layers** (:mod:`gnnscale.nn.relational`): R-GCN (ReLU between layers), R-SAGE (ReLU), R-GAT (hidden layers
concatenate ``heads`` heads of ``hidden_dim`` features, the output layer averages ``out_heads``; ELU, as the
built-in GAT). Dropout is keyed as the built-in models' (sites: 0 the input rows after projection and
embedding, ``1 + l`` after layer ``l``, ``ATTENTION_SITE + l`` R-GAT's attention in layer ``l``), the same
masks whichever ``kernels`` compute.

**Config.** :class:`TypedModelConfig` is a class of its own rather than more fields of
:class:`~gnnscale.nn.models.ModelConfig`: a typed model is rebuilt from its graph's schema (node types, the
width of each type with features, the node count of each type without, relations), which a homogeneous
model has no use for and which ``ModelConfig``, the source of the model flags and of every homogeneous
checkpoint's signature, would otherwise carry for every run. The settings both share keep
``ModelConfig``'s names (``hidden_dim``, ``dropout``, ``input_dropout``, ``heads``, ``attn_dropout``,
``kernels``), so the model flags pass to either.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnnscale.graph.typed import Relation, TypedGraph, TypedSchema, parse_relation
from gnnscale.nn.functional import check_dropout_key, keyed_dropout, site_key
from gnnscale.nn.models import (ATTENTION_SITE, TYPED_MODELS, ModelConfig, builtin_config, check_dims, check_kernels,
                                check_prob)
from gnnscale.nn.relational import RGATConv, RGCNConv, RSAGEConv, destination_positions
from gnnscale.sampling.typed import TypedBlock

TypedModelName = Literal["rgcn", "rsage", "rgat"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedModelConfig:
    """What rebuilds a :class:`TypedModel`; validated on construction.
    :meth:`for_graph` fills the schema from a :class:`~gnnscale.graph.typed.TypedGraph`.

    Args:
        name: ``"rgcn"``, ``"rsage"`` or ``"rgat"``.
        node_types: the graph's node types, in id order.
        feature_dims: ``{node type: input width}`` of every type with features.
        embedding_rows: ``{node type: node count}`` of every type without features: the rows of its learnable
            embedding. Every node type is in exactly one of the two.
        relations: the graph's relations in id order (the order of ``TypedBlock.relations``), as
            ``(src, name, dst)`` tuples (Relations and ``"src__name__dst"`` strings are read too).
        num_classes: output logits (> 0).
        num_layers: layers = blocks per batch (> 0).
        hidden_dim: the width between layers (> 0), which the input projections and embeddings produce; for
            R-GAT the features per head (a representation has ``heads * hidden_dim``). Default 128.
        dropout: between layers, in [0, 1). Default 0.5.
        input_dropout: on the input rows (after projection and embedding), in [0, 1). Default 0.0.
        heads: R-GAT's heads in hidden layers, concatenated (> 0). Default 4 (MLPerf's R-GAT).
        out_heads: R-GAT's heads in the output layer, averaged (> 0). Default 1.
        attn_dropout: R-GAT's dropout on attention weights, in [0, 1). Default 0.0.
        num_bases: R-GCN's basis decomposition: the bases the relations' weights combine (> 0), or None for
            one weight per relation. Default None.
        kernels: ``"auto"``, ``"numba"`` or ``"torch"``, as :class:`~gnnscale.nn.models.ModelConfig`. Default
            ``"auto"``.

    R-SAGE and R-GAT of more than one layer need a relation into every type that some relation leaves (after
    the first layer, a type that receives nothing has no representation; PyG's ``to_hetero`` needs it as
    well): add the reverses (``typed_graph(..., reverse=True)``).
    """

    name: TypedModelName
    node_types: tuple[str, ...]
    feature_dims: dict[str, int]
    embedding_rows: dict[str, int]
    relations: tuple[tuple[str, str, str], ...]
    num_classes: int
    num_layers: int
    hidden_dim: int = 128
    dropout: float = 0.5
    input_dropout: float = 0.0
    heads: int = 4
    out_heads: int = 1
    attn_dropout: float = 0.0
    num_bases: int | None = None
    kernels: str = "auto"

    def __post_init__(self) -> None:
        if self.name not in TYPED_MODELS:
            raise ValueError(f"model: expected one of {TYPED_MODELS}, got {self.name!r}")
        # Plain tuples and dicts whatever came (lists from a JSON checkpoint, Relations): asdict() and
        # torch.load(weights_only=True) read them back, and two equal configs compare equal.
        object.__setattr__(self, "node_types", tuple(self.node_types))
        object.__setattr__(self, "feature_dims", dict(self.feature_dims))
        object.__setattr__(self, "embedding_rows", dict(self.embedding_rows))
        relations = tuple(parse_relation(tuple(r) if isinstance(r, list) else r) for r in self.relations)
        object.__setattr__(self, "relations", tuple((r.src, r.name, r.dst) for r in relations))
        self._check_schema(relations)
        check_dims(num_classes=self.num_classes, num_layers=self.num_layers, hidden_dim=self.hidden_dim,
                   heads=self.heads, out_heads=self.out_heads)
        if self.num_bases is not None:
            check_dims(num_bases=self.num_bases)
        for field in ("dropout", "input_dropout", "attn_dropout"):
            check_prob(field, getattr(self, field))
        check_kernels(self.kernels)

    def _check_schema(self, relations: tuple[Relation, ...]) -> None:
        types = self.node_types
        if not types or len(set(types)) != len(types):
            raise ValueError(f"node_types: expected one or more distinct names, got {types!r}")
        for field in ("feature_dims", "embedding_rows"):
            for t, value in getattr(self, field).items():
                if t not in types:
                    raise ValueError(f"{field}: node type {t!r} is not one of {', '.join(types)}")
                check_dims(**{f"{field}[{t}]": value})
        for t in types:
            where = (t in self.feature_dims) + (t in self.embedding_rows)
            if where != 1:
                raise ValueError(f"feature_dims, embedding_rows: expected node type {t!r} in exactly one (its feature "
                                 f"width, or the node count of its embedding), found it in {where}")
        if not relations or len(set(relations)) != len(relations):
            raise ValueError(f"relations: expected one or more distinct relations, got {list(map(str, relations))}")
        for rel in relations:
            for end in (rel.src, rel.dst):
                if end not in types:
                    raise ValueError(f"relations: {rel} names node type {end!r}, not one of {', '.join(types)}")
        if self.name != "rgcn" and self.num_layers > 1:
            entered = {rel.dst for rel in relations}
            silent = sorted({rel.src for rel in relations} - entered)
            if silent:
                raise ValueError(f"relations: node type {silent[0]!r} sends messages but no relation enters it, so "
                                 f"{self.name} has no representation of it after the first layer; add the reverse "
                                 f"relations (typed_graph(..., reverse=True))")

    @classmethod
    def for_graph(cls, graph: TypedGraph | TypedSchema, *, feature_dims: Mapping[str, int],
                  **fields) -> TypedModelConfig:
        """The config of a model of ``graph`` (or of its schema): its node types and relations, ``feature_dims`` for
        the types with features and the node counts of the others; ``fields``: the rest (name, num_classes, ...)."""
        if not isinstance(graph, (TypedGraph, TypedSchema)):
            raise TypeError(f"graph: expected a TypedGraph, got {type(graph).__name__}")
        unknown = sorted(set(feature_dims) - set(graph.node_types))
        if unknown:
            raise ValueError(f"feature_dims: node type {unknown[0]!r} is not one of {', '.join(graph.node_types)}")
        return cls(node_types=graph.node_types, feature_dims=dict(feature_dims),
                   embedding_rows={t: graph.count(t) for t in graph.node_types if t not in feature_dims},
                   relations=graph.relations, **fields)

    @property
    def width(self) -> int:
        """Features of every node's representation between layers (and of the input rows)."""
        return self.heads * self.hidden_dim if self.name == "rgat" else self.hidden_dim


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedInput:
    """A typed model's ``x``: the first block's sources, by node type.

    Args:
        num_src: ``blocks[0].num_src``.
        positions: ``{node type: int64 [n_t]}``: the type's sources as positions among ``blocks[0].src_ids``,
            for every node type of the model (empty where the batch has none); each source in exactly one.
        features: ``{node type: float [n_t, width_t]}``: the feature rows of every type with features, in the
            order of its positions: in the model's dtype, or as stored in half precision (float16, bfloat16),
            which the model widens a chunk at a time (half the bytes to fetch, move and keep).
        ids: ``{node type: int64 [n_t]}``: the local ids (rows of its embedding) of every type without
            features, in the order of its positions.
    """

    num_src: int
    positions: dict[str, Tensor]
    features: dict[str, Tensor]
    ids: dict[str, Tensor]

    def __post_init__(self) -> None:
        """The O(types) checks; :class:`TypedModel` checks the types against its config."""
        both = set(self.features) & set(self.ids)
        if both:
            raise ValueError(f"x: node type {sorted(both)[0]!r} has both features and ids; a type has one or the other")
        for t, rows in (*self.features.items(), *self.ids.items()):
            if t not in self.positions:
                raise ValueError(f"x: node type {t!r} has rows but no positions")
            if rows.shape[0] != self.positions[t].shape[0]:
                raise ValueError(f"x: node type {t!r} has {rows.shape[0]} rows for {self.positions[t].shape[0]} "
                                 f"positions")
        total = sum(int(p.shape[0]) for p in self.positions.values())
        if total != self.num_src:
            raise ValueError(f"x: the positions of all types cover {total} sources, expected num_src={self.num_src}")

    def moved(self, move) -> TypedInput:
        """This input with ``move`` applied to each of its tensors (the copy stage's, or :meth:`to`)."""
        def each(d: dict[str, Tensor]) -> dict[str, Tensor]:
            return {t: move(v) for t, v in d.items()}

        return TypedInput(num_src=self.num_src, positions=each(self.positions), features=each(self.features),
                          ids=each(self.ids))

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> TypedInput:
        return self.moved(lambda v: v.to(device, non_blocking=non_blocking))


def sources_by_type(src_ids: Tensor, graph: TypedGraph | TypedSchema) -> dict[str, tuple[Tensor, Tensor]]:
    """``{node type: (positions, local ids)}`` of global ids ``src_ids``: where each type's nodes are in
    ``src_ids`` (int64, ascending) and their ids within the type (int64), for every node type of ``graph`` (the
    typed graph, or its schema).
    What a fetch stage reads each type's rows by. Runs where ``src_ids`` is; one host sync (the counts)."""
    if src_ids.numel() and (int(src_ids.min()) < 0 or int(src_ids.max()) >= graph.num_nodes):
        raise ValueError(f"src_ids: expected global ids in [0, {graph.num_nodes}), got range "
                         f"[{int(src_ids.min())}, {int(src_ids.max())}]")
    offsets = torch.tensor(graph.type_offsets, dtype=torch.int64, device=src_ids.device)  # a copy: may be a memmap
    types = torch.searchsorted(offsets, src_ids, right=True) - 1
    grouped = torch.sort(types, stable=True).indices  # by type, ascending within one (stable)
    counts = torch.bincount(types, minlength=len(graph.node_types)).tolist()  # host sync: the split sizes
    return {name: (pos, src_ids[pos] - offsets[t])
            for t, (name, pos) in enumerate(zip(graph.node_types, grouped.split(counts)))}


def typed_input(block: TypedBlock, graph: TypedGraph, features: Mapping[str, Tensor]) -> TypedInput:
    """The :class:`TypedInput` of ``block``'s sources (the first block of a batch) from in-memory features.

    Args:
        block: the first block.
        graph: its typed graph.
        features: ``{node type: float [count, width]}``: the whole feature matrix of every type with features
            (row ``i``: local id ``i``); the other types get their local ids.
    """
    unknown = sorted(set(features) - set(graph.node_types))
    if unknown:
        raise ValueError(f"features: node type {unknown[0]!r} is not one of {', '.join(graph.node_types)}")
    by_type = sources_by_type(block.src_ids, graph)
    return TypedInput(num_src=block.num_src, positions={t: pos for t, (pos, _) in by_type.items()},
                      features={t: features[t][ids] for t, (_, ids) in by_type.items() if t in features},
                      ids={t: ids for t, (_, ids) in by_type.items() if t not in features})


class _PlaceRows(torch.autograd.Function):
    """``out[positions[k]] = rows[k]`` for every type ``k``: the types' rows as one [num_src, width] tensor, each
    row written once where a cat and an index_copy_ write it twice; the backward reads each type's gradient
    rows straight from ``out``'s (no cat to split)."""

    @staticmethod
    def forward(ctx, num_src: int, positions: list[Tensor], *rows: Tensor) -> Tensor:
        # One dtype as torch.cat's: under autocast a projection's rows are half, an embedding's float32. The
        # engine casts each gradient back to its rows' dtype.
        dtype = functools.reduce(torch.promote_types, (part.dtype for part in rows))
        out = rows[0].new_empty(num_src, rows[0].shape[1], dtype=dtype)
        for pos, part in zip(positions, rows):
            out.index_copy_(0, pos, part.to(dtype))
        ctx.positions = positions
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        return None, None, *(grad.index_select(0, pos) for pos in ctx.positions)


def place_rows(num_src: int, positions: Sequence[Tensor], rows: Sequence[Tensor]) -> Tensor:
    """float [num_src, width]: ``rows[k]`` at ``positions[k]`` for every ``k`` (each position written once; the
    positions together cover every row)."""
    return _PlaceRows.apply(num_src, list(positions), *rows)


ROWS_PER_CHUNK = 16384  # feature rows widened at a time: 64 MiB of float32 at 1024 features


class _NarrowRowsLinear(torch.autograd.Function):
    """``rows @ weight.T + bias`` for feature rows stored narrower than the weight (float16 or bfloat16 rows, a
    float32 model): computed in the weight's dtype a chunk of rows at a time, keeping only the narrow rows for the
    backward. ``nn.Linear`` on rows widened first would hold the widened copy (twice the rows' bytes: 4 GiB per
    IGB-H-shaped batch of a million 1024-d sources) from the forward to the backward."""

    @staticmethod
    def forward(ctx, rows: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        out = rows.new_empty((rows.shape[0], weight.shape[0]), dtype=weight.dtype)
        for lo in range(0, rows.shape[0], ROWS_PER_CHUNK):
            torch.addmm(bias, rows[lo:lo + ROWS_PER_CHUNK].to(weight.dtype), weight.t(),
                        out=out[lo:lo + ROWS_PER_CHUNK])
        ctx.save_for_backward(rows, weight)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        rows, weight = ctx.saved_tensors
        grad_weight = torch.zeros_like(weight)
        for lo in range(0, rows.shape[0], ROWS_PER_CHUNK):
            grad_weight.addmm_(grad[lo:lo + ROWS_PER_CHUNK].t(), rows[lo:lo + ROWS_PER_CHUNK].to(weight.dtype))
        grad_rows = (grad @ weight).to(rows.dtype) if ctx.needs_input_grad[0] else None
        return grad_rows, grad_weight, grad.sum(0)


def project_rows(linear: nn.Linear, rows: Tensor) -> Tensor:
    """``linear(rows)``; rows stored narrower than its weight (half precision) are widened a chunk at a time
    (:class:`_NarrowRowsLinear`). Under autocast, ``linear`` itself: autocast picks the dtype."""
    if rows.dtype == linear.weight.dtype or torch.is_autocast_enabled(rows.device.type):
        return linear(rows)
    return _NarrowRowsLinear.apply(rows, linear.weight, linear.bias)


class TypedEncoder(nn.Module):
    """Every source to the model's width: ``project[t]`` (a Linear with bias) for a type with features,
    ``embed[t]`` (an Embedding over its node count; Xavier-uniform, as DGL's ``RelGraphEmbed``) for a type
    without. Shapes: ``x`` -> float [x.num_src, width], row ``p`` the source at position ``p``. Feature rows may
    come as stored, in half precision: they are widened to the weights' dtype inside the projection
    (:func:`project_rows`)."""

    def __init__(self, config: TypedModelConfig) -> None:
        super().__init__()
        self.node_types, self.width = config.node_types, config.width
        self.project = nn.ModuleDict({t: nn.Linear(d, config.width) for t, d in config.feature_dims.items()})
        self.embed = nn.ModuleDict({t: nn.Embedding(n, config.width) for t, n in config.embedding_rows.items()})
        for emb in self.embed.values():
            nn.init.xavier_uniform_(emb.weight)

    def forward(self, x: TypedInput) -> Tensor:
        self._check(x)
        rows = [project_rows(self.project[t], x.features[t]) if t in self.project else self.embed[t](x.ids[t])
                for t in self.node_types]
        return place_rows(x.num_src, [x.positions[t] for t in self.node_types], rows)

    def _check(self, x: TypedInput) -> None:
        if not isinstance(x, TypedInput):
            raise TypeError(f"x: expected a TypedInput (the first block's sources by node type), got "
                            f"{type(x).__name__}")
        for t in self.node_types:
            if t not in x.positions:
                raise ValueError(f"x: expected the positions of node type {t!r}")
            if t in self.project:
                if t not in x.features:
                    raise ValueError(f"x: expected the feature rows of node type {t!r}")
                width = self.project[t].in_features
                if x.features[t].dim() != 2 or x.features[t].shape[1] != width:
                    raise ValueError(f"x: node type {t!r} has feature rows of shape {list(x.features[t].shape)}, "
                                     f"the model takes {width} features")
            elif t not in x.ids:
                raise ValueError(f"x: expected the local ids of node type {t!r} (it has no features)")
        extra = sorted(set(x.positions) - set(self.node_types))
        if extra:
            raise ValueError(f"x: node type {extra[0]!r} is not one of the model's ({', '.join(self.node_types)})")


def _layers(cfg: TypedModelConfig) -> list[nn.Module]:
    """The layers ``cfg`` names: width -> ... -> width -> num_classes."""
    width, last = cfg.width, cfg.num_layers - 1
    if cfg.name == "rgcn":
        return [RGCNConv(width, cfg.num_classes if i == last else width, len(cfg.relations), num_bases=cfg.num_bases,
                         kernels=cfg.kernels) for i in range(cfg.num_layers)]
    if cfg.name == "rsage":
        return [RSAGEConv(width, cfg.num_classes if i == last else width, cfg.relations, kernels=cfg.kernels)
                for i in range(cfg.num_layers)]
    hidden = [RGATConv(width, cfg.hidden_dim, cfg.heads, cfg.relations, concat=True, attn_dropout=cfg.attn_dropout,
                       kernels=cfg.kernels) for _ in range(last)]
    return hidden + [RGATConv(width, cfg.num_classes, cfg.out_heads, cfg.relations, concat=False,
                              attn_dropout=cfg.attn_dropout, kernels=cfg.kernels)]


class TypedModel(nn.Module):
    """R-GCN, R-SAGE or R-GAT (``config.name``) over typed blocks, freshly initialised from ``config``; see the
    module docstring. ``config`` records the :class:`TypedModelConfig` it was built from."""

    def __init__(self, config: TypedModelConfig) -> None:
        super().__init__()
        if not isinstance(config, TypedModelConfig):
            raise TypeError(f"config: expected a TypedModelConfig, got {type(config).__name__}")
        self.config = config
        self.relations = tuple(parse_relation(r) for r in config.relations)
        self.encoder = TypedEncoder(config)
        self.layers = nn.ModuleList(_layers(config))

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def forward(self, blocks: Sequence[TypedBlock], x: TypedInput, *, dropout_key: int | None = None) -> Tensor:
        """Args:
            blocks: ``num_layers`` typed blocks in model order (input layer first).
            x: the first block's sources by node type (:class:`TypedInput`).
            dropout_key: int in [0, 2**63), the step's dropout key (training mode); None draws one from
                torch's global generator.

        Shapes:
            -> float [blocks[-1].num_dst, num_classes] (logits).
        """
        if len(blocks) != self.num_layers:
            raise ValueError(f"blocks: expected {self.num_layers} blocks (one per layer), got {len(blocks)}")
        if isinstance(x, TypedInput) and x.num_src != blocks[0].num_src:
            raise ValueError(f"x: expected the {blocks[0].num_src} sources of the first block, got {x.num_src}")
        cfg = self.config
        key = check_dropout_key(dropout_key) if self.training else 0
        h = keyed_dropout(self.encoder(x), cfg.input_dropout, site_key(key, 0), training=self.training,
                          kernels=cfg.kernels)
        positions = x.positions  # R-GAT: each layer's sources by type
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            if isinstance(layer, RGATConv):
                h = layer(block, h, positions, dropout_key=site_key(key, ATTENTION_SITE + i))
                positions = destination_positions(block, self.relations)
            else:
                h = layer(block, h)
            if i < self.num_layers - 1:
                relu = cfg.name != "rgat"
                h = h if relu else F.elu(h)
                h = keyed_dropout(h, cfg.dropout, site_key(key, 1 + i), relu=relu, training=self.training,
                                  kernels=cfg.kernels)
        return h


def embeddings_by_dataset_id(state: Mapping[str, Tensor], config: TypedModelConfig, new_to_old: np.ndarray,
                             type_offsets: np.ndarray) -> dict[str, Tensor]:
    """``state``, a state dict of a model of ``config`` trained over a renumbered graph (a typed partition's), with
    the rows of every embedding (the types without features) moved to the dataset's numbering: node ``v``'s row
    goes to row ``new_to_old[v] - lo`` (``lo``: its type's first id in ``type_offsets``; a partition renumbers
    within each type). What a model file holds, so that the file predicts on the dataset itself."""
    out = dict(state)
    for key, rows in _embedding_rows(state, config, new_to_old, type_offsets):
        out[key] = state[key].new_empty(state[key].shape).index_copy_(0, rows, state[key])
    return out


def embeddings_by_partition_id(state: Mapping[str, Tensor], config: TypedModelConfig, new_to_old: np.ndarray,
                               type_offsets: np.ndarray) -> dict[str, Tensor]:
    """The inverse of :func:`embeddings_by_dataset_id`: a model file's state (embedding rows by the dataset's ids)
    with every embedding's rows in a typed partition's numbering, node ``v``'s row read from row
    ``new_to_old[v] - lo``. What a model file's model computes with over that partition."""
    out = dict(state)
    for key, rows in _embedding_rows(state, config, new_to_old, type_offsets):
        out[key] = state[key].index_select(0, rows)
    return out


def _embedding_rows(state: Mapping[str, Tensor], config: TypedModelConfig, new_to_old: np.ndarray,
                    type_offsets: np.ndarray):
    """``(state key, int64 rows)`` of every embedding: the dataset's row (local id) of each of the partition's."""
    for t in config.embedding_rows:
        lo = int(type_offsets[config.node_types.index(t)])
        key = f"encoder.embed.{t}.weight"
        yield key, torch.from_numpy(np.asarray(new_to_old[lo:lo + state[key].shape[0]], dtype=np.int64) - lo)


def model_config(model: nn.Module) -> ModelConfig | TypedModelConfig | None:
    """The config a built-in model (plain or typed) records; None for any other module."""
    return model.config if isinstance(model, TypedModel) else builtin_config(model)
