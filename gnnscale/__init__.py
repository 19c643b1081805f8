"""gnnscale: mini-batch GNN training on graphs too large for one machine."""

__version__ = "0.1.0"
