"""GraphSAGE, GCN and GAT over a list of Blocks (input layer first), their config and a builder.

A model with ``num_layers`` layers consumes exactly ``num_layers`` blocks: block ``l`` carries layer
``l``'s messages, and its destination nodes are block ``l + 1``'s sources, so the hidden features flow
from ``blocks[0].num_src`` rows down to the ``blocks[-1].num_dst`` seed nodes.

Dropout masks come from a key (``model(blocks, x, dropout_key=k)``; the training loop passes one per
step, derived from ``(seed, epoch, step)``), so they do not depend on torch's global generator or on
the thread count, and a resumed run draws the same masks. ReLU and dropout are one pass.

``kernels`` picks how every layer and dropout computes: ``"auto"`` (numba on float32/float64 CPU
tensors, the torch-native path elsewhere, e.g. on CUDA), ``"numba"`` or ``"torch"`` (the torch path on
any device, the CPU included: the same numbers within 1e-5 and the same dropout masks).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from gnnscale.nn.functional import KERNELS, check_dropout_key, keyed_dropout, site_key
from gnnscale.nn.layers import GATConv, GCNConv, SAGEConv
from gnnscale.sampling.block import Block
from gnnscale.settings import setting

ModelName = Literal["sage", "gcn", "gat"]
MODELS = ("sage", "gcn", "gat")
# The relational models of typed graphs (gnnscale.nn.typed_models: TypedModelConfig), named here for --model.
TYPED_MODELS = ("rgcn", "rsage", "rgat")
ACTIVATIONS = ("relu", "elu")
# Dropout sites under a step's key: 0 the input, 1 + l after layer l, ATTENTION_SITE + l inside layer l.
ATTENTION_SITE = 1 << 16


class _BlockModel(nn.Module):
    """Stack of layers applied block by block: input dropout, then layer, activation, dropout. Every
    built-in model records its :class:`ModelConfig` in ``config``."""

    config: "ModelConfig"

    def __init__(self, layers: list[nn.Module], activation: str, *, dropout: float, input_dropout: float,
                 kernels: str) -> None:
        super().__init__()
        check_kernels(kernels)
        check_prob("dropout", dropout)
        check_prob("input_dropout", input_dropout)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation: expected one of {ACTIVATIONS}, got {activation!r}")
        self.layers = nn.ModuleList(layers)
        self.activation = activation
        self.dropout, self.input_dropout, self.kernels = dropout, input_dropout, kernels

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def forward(self, blocks: Sequence[Block], x: Tensor, *, dropout_key: int | None = None) -> Tensor:
        """Args:
            blocks: ``num_layers`` blocks in model order (input layer first), as from ``sample_blocks``.
            x: float [blocks[0].num_src, in_dim], features of the first block's source nodes.
            dropout_key: int in [0, 2**63), the step's dropout key (training mode); ``None`` draws one
                from torch's global generator.

        Shapes:
            x [blocks[0].num_src, in_dim] -> [blocks[-1].num_dst, num_classes] (logits).
        """
        if len(blocks) != self.num_layers:
            raise ValueError(f"blocks: expected {self.num_layers} blocks (one per layer), got {len(blocks)}")
        key = check_dropout_key(dropout_key) if self.training else 0
        x = keyed_dropout(x, self.input_dropout, site_key(key, 0), training=self.training, kernels=self.kernels)
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            if isinstance(layer, GATConv):
                x = layer(block, x, dropout_key=site_key(key, ATTENTION_SITE + i))
            else:
                x = layer(block, x)
            if i < self.num_layers - 1:
                relu = self.activation == "relu"
                x = x if relu else F.elu(x)
                x = keyed_dropout(x, self.dropout, site_key(key, 1 + i), relu=relu, training=self.training,
                                  kernels=self.kernels)
        return x


def _widths(in_dim: int, hidden_dim: int, num_classes: int, num_layers: int) -> list[tuple[int, int]]:
    """(in, out) of every layer: in_dim -> hidden_dim -> ... -> num_classes."""
    check_dims(in_dim=in_dim, hidden_dim=hidden_dim, num_classes=num_classes, num_layers=num_layers)
    dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [num_classes]
    return list(zip(dims[:-1], dims[1:]))


class GraphSAGE(_BlockModel):
    """GraphSAGE (mean aggregator) with ReLU and dropout between layers.

    Args:
        in_dim, hidden_dim, num_classes: feature sizes of the input, hidden layers and output logits.
        num_layers: number of SAGE layers (= number of blocks per batch).
        dropout: dropout after every hidden layer. Default 0.5.
        input_dropout: dropout on the input features. Default 0.0.
        kernels: ``"auto"``, ``"numba"`` or ``"torch"`` (see the module docstring). Default ``"auto"``.
    """

    def __init__(self, in_dim: int, hidden_dim: int, num_classes: int, num_layers: int, *,
                 dropout: float = 0.5, input_dropout: float = 0.0, kernels: str = "auto") -> None:
        check_kernels(kernels)
        layers = [SAGEConv(i, o, backend=kernels) for i, o in _widths(in_dim, hidden_dim, num_classes, num_layers)]
        super().__init__(layers, "relu", dropout=dropout, input_dropout=input_dropout, kernels=kernels)
        self.config = ModelConfig(name="sage", in_dim=in_dim, hidden_dim=hidden_dim, num_classes=num_classes,
                                  num_layers=num_layers, dropout=dropout, input_dropout=input_dropout, kernels=kernels)


class GCN(_BlockModel):
    """GCN with the sampling-safe random-walk norm (see :class:`~gnnscale.nn.layers.GCNConv`), ReLU, dropout.

    Args: as :class:`GraphSAGE`.
    """

    def __init__(self, in_dim: int, hidden_dim: int, num_classes: int, num_layers: int, *,
                 dropout: float = 0.5, input_dropout: float = 0.0, kernels: str = "auto") -> None:
        check_kernels(kernels)
        layers = [GCNConv(i, o, backend=kernels) for i, o in _widths(in_dim, hidden_dim, num_classes, num_layers)]
        super().__init__(layers, "relu", dropout=dropout, input_dropout=input_dropout, kernels=kernels)
        self.config = ModelConfig(name="gcn", in_dim=in_dim, hidden_dim=hidden_dim, num_classes=num_classes,
                                  num_layers=num_layers, dropout=dropout, input_dropout=input_dropout, kernels=kernels)


class GAT(_BlockModel):
    """GAT (Velickovic et al.): hidden layers concatenate ``heads`` heads, the output layer averages
    ``out_heads`` heads; ELU and dropout between layers, as in the paper.

    Args:
        in_dim, num_classes, num_layers: as :class:`GraphSAGE`.
        hidden_dim: features per head in the hidden layers; a hidden representation has
            ``heads * hidden_dim`` features (the paper's Cora model: 8 heads x 8 = 64).
        heads: heads of every hidden layer, concatenated. Default 8.
        out_heads: heads of the output layer, averaged. Default 1.
        dropout, input_dropout, kernels: as :class:`GraphSAGE`.
        attn_dropout: dropout on attention weights in every layer. Default 0.0.
    """

    def __init__(self, in_dim: int, hidden_dim: int, num_classes: int, num_layers: int, *, heads: int = 8,
                 out_heads: int = 1, dropout: float = 0.5, input_dropout: float = 0.0,
                 attn_dropout: float = 0.0, kernels: str = "auto") -> None:
        check_dims(heads=heads, out_heads=out_heads)
        check_kernels(kernels)
        # Hidden layers concatenate their heads, so every layer after the first reads heads * hidden_dim.
        widths = _widths(in_dim, heads * hidden_dim, num_classes, num_layers)
        layers: list[nn.Module] = [GATConv(i, hidden_dim, heads, concat=True, attn_dropout=attn_dropout,
                                           backend=kernels) for i, _ in widths[:-1]]
        layers.append(GATConv(widths[-1][0], num_classes, out_heads, concat=False, attn_dropout=attn_dropout,
                              backend=kernels))
        super().__init__(layers, "elu", dropout=dropout, input_dropout=input_dropout, kernels=kernels)
        self.config = ModelConfig(name="gat", in_dim=in_dim, hidden_dim=hidden_dim, num_classes=num_classes,
                                  num_layers=num_layers, dropout=dropout, input_dropout=input_dropout, heads=heads,
                                  out_heads=out_heads, attn_dropout=attn_dropout, kernels=kernels)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """What :func:`build_model` needs; validated on construction.

    Args:
        name: ``"sage"``, ``"gcn"`` or ``"gat"``.
        in_dim: input feature size (> 0).
        hidden_dim: hidden width (> 0); for GAT the features per head (hidden layers are ``heads * hidden_dim``).
        num_classes: output logits (> 0).
        num_layers: layers = blocks per batch = number of fanouts (> 0).
        dropout: between layers, in [0, 1). Default 0.5.
        input_dropout: on the input features, in [0, 1). Default 0.0.
        heads: GAT hidden-layer heads (> 0). Default 8.
        out_heads: GAT output-layer heads, averaged (> 0). Default 1.
        attn_dropout: GAT attention dropout, in [0, 1). Default 0.0.
        kernels: ``"auto"`` (numba on CPU float32/float64, the torch path elsewhere), ``"numba"`` or
            ``"torch"`` (the torch-native path on any device, the CPU included). The same numbers
            within 1e-5 and the same dropout masks either way. Default ``"auto"``.
    """

    in_dim: int
    num_classes: int
    num_layers: int
    name: ModelName = setting("sage", "the GNN: sage, gcn or gat; on a typed graph rgcn, rsage or rgat (one operator per "
                                      "relation, summed)", name="--model", choices=MODELS + TYPED_MODELS,
                              aliases=("model",))
    hidden_dim: int = setting(128, "hidden size (per head for GAT)", name="--hidden")
    dropout: float = setting(0.5, "dropout between layers")
    input_dropout: float = setting(0.0, "dropout on the input features")
    heads: int = setting(8, "GAT attention heads in hidden layers")
    out_heads: int = 1
    attn_dropout: float = setting(0.0, "GAT dropout on attention weights")
    kernels: str = setting("auto", "how the layers compute: auto (numba on the CPU, torch ops elsewhere), numba, or "
                                   "torch (torch-native ops on any device, the same numbers within 1e-5)",
                           choices=KERNELS)

    def __post_init__(self) -> None:
        if self.name not in MODELS:
            typed = f" ({self.name} is a typed graph's model: TypedModelConfig)" if self.name in TYPED_MODELS else ""
            raise ValueError(f"model: expected one of {MODELS}, got {self.name!r}{typed}")
        check_dims(in_dim=self.in_dim, hidden_dim=self.hidden_dim, num_classes=self.num_classes,
                    num_layers=self.num_layers, heads=self.heads, out_heads=self.out_heads)
        for field in ("dropout", "input_dropout", "attn_dropout"):
            check_prob(field, getattr(self, field))
        check_kernels(self.kernels)


def build_model(cfg: ModelConfig) -> nn.Module:
    """The model ``cfg`` describes, freshly initialised."""
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"cfg: expected a ModelConfig, got {type(cfg).__name__}")
    common = dict(dropout=cfg.dropout, input_dropout=cfg.input_dropout, kernels=cfg.kernels)
    dims = (cfg.in_dim, cfg.hidden_dim, cfg.num_classes, cfg.num_layers)
    if cfg.name == "sage":
        model = GraphSAGE(*dims, **common)
    elif cfg.name == "gcn":
        model = GCN(*dims, **common)
    else:
        model = GAT(*dims, heads=cfg.heads, out_heads=cfg.out_heads, attn_dropout=cfg.attn_dropout, **common)
    # ``cfg`` itself, with the fields this kind of model ignores (GAT's heads for sage): a checkpoint's
    # run signature records the config the run was given.
    model.config = cfg
    return model


def builtin_config(model: nn.Module) -> ModelConfig | None:
    """The :class:`ModelConfig` of a built-in model (GraphSAGE, GCN, GAT record the one they were built
    with); None for any other module."""
    return model.config if isinstance(model, _BlockModel) else None


def check_dims(**dims: int) -> None:
    for field, value in dims.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{field}: expected an int, got {type(value).__name__}")
        if value <= 0:
            raise ValueError(f"{field}: expected a positive int, got {value}")


def check_kernels(kernels: str) -> None:
    if kernels not in KERNELS:
        raise ValueError(f"kernels: expected one of {KERNELS}, got {kernels!r}")


def check_prob(field: str, p: float) -> None:
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p < 1.0:
        raise ValueError(f"{field}: expected a probability in [0, 1), got {p!r}")
