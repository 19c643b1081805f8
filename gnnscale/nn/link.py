"""Link prediction's model: a built-in encoder (GraphSAGE, GCN, GAT) whose output is a node embedding,
and a decoder that scores a pair of embeddings.

- ``"dot"``: ``score(u, v) = <h_u, h_v>`` (GAE's inner product decoder), no parameters.
- ``"mlp"``: ``score(u, v) = MLP(h_u * h_v)``, two linear layers with a ReLU between them over the
  Hadamard product (the decoder of PyG's link-prediction examples).

Both are symmetric in ``u`` and ``v``. Scores are logits: ``sigmoid(score)`` is the probability of an edge.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gnnscale.nn.models import ModelConfig, build_model

DECODERS = ("dot", "mlp")


class DotDecoder(nn.Module):
    """``(h_src * h_dst).sum(-1)``: float [n, d] x 2 -> [n]."""

    def forward(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        return (h_src * h_dst).sum(-1)


class MLPDecoder(nn.Module):
    """``Linear(d, d) -> ReLU -> Linear(d, 1)`` over ``h_src * h_dst``: float [n, d] x 2 -> [n]."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 1)

    def forward(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        return self.out(torch.relu(self.hidden(h_src * h_dst))).squeeze(-1)


class LinkModel(nn.Module):
    """An encoder over blocks and a pair decoder.

    Args:
        encoder: a built-in model (:func:`gnnscale.nn.models.build_model`) whose ``num_classes`` is the
            embedding width.
        decoder: ``"dot"`` or ``"mlp"``.
    """

    def __init__(self, encoder: nn.Module, decoder: str) -> None:
        super().__init__()
        if decoder not in DECODERS:
            raise ValueError(f"decoder: expected one of {DECODERS}, got {decoder!r}")
        self.encoder = encoder
        self.decoder_name = decoder
        dim = encoder.config.num_classes
        self.decoder = DotDecoder() if decoder == "dot" else MLPDecoder(dim)

    @property
    def config(self) -> ModelConfig:
        """The encoder's config (``num_classes`` is the embedding width)."""
        return self.encoder.config

    def forward(self, blocks, x: Tensor, *, dropout_key: int | None = None) -> Tensor:
        """float [blocks[-1].num_dst, embedding width]: the seeds' embeddings."""
        return self.encoder(blocks, x, dropout_key=dropout_key)

    def score(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        """float [n]: the logits of the pairs whose embeddings are ``h_src[i]``, ``h_dst[i]``."""
        return self.decoder(h_src, h_dst)


def build_link_model(encoder: ModelConfig, decoder: str) -> LinkModel:
    """A freshly initialised :class:`LinkModel` (the encoder first, then the decoder, from torch's generator)."""
    return LinkModel(build_model(encoder), decoder)
