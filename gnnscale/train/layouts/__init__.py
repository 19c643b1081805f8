"""Distributed layouts: what each worker samples, fetches and computes per iteration.

:mod:`~gnnscale.train.layouts.base` holds what every layout shares (the protocol, the spec, the values
between the loop and a layout); one module per strategy implements it (data parallelism's ``hybrid``
and ``vanilla``, the matrix samplers' ``1d`` and ``1.5d``, split parallelism, DGS on top of data
parallelism); :mod:`~gnnscale.train.layouts.registry` knows them all by name.
"""

from gnnscale.train.layouts.base import Layout, LayoutContext, LayoutOptions, LayoutSpec
from gnnscale.train.layouts.registry import (LAYOUTS, build_layout, check_layout_options, layout_options,
                                            layout_spec, resolved)

__all__ = ["LAYOUTS", "Layout", "LayoutContext", "LayoutOptions", "LayoutSpec", "build_layout",
           "check_layout_options", "layout_options", "layout_spec", "resolved"]
