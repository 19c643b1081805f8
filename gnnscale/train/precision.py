"""The training step's precision (``--precision``, ``TrainConfig.precision``; Lightning's names).

- ``32``: float32 throughout (the default).
- ``bf16-mixed``: the forward pass and the loss under ``torch.autocast`` to bfloat16, on the CPU or a GPU:
  products (linear layers) compute in bfloat16, parameters, gradients and Adam's state stay float32.
  bfloat16 has float32's range, so no gradient scaling is needed.
- ``16-mixed``: autocast to float16 with a gradient scaler (``torch.amp.GradScaler``): float16's range ends
  at 65504 and its smallest normal is 6e-5, so the loss is scaled up before the backward pass (small
  gradients do not vanish), the gradients are unscaled inside the optimizer step, a step whose gradients
  overflowed is skipped, and the scale adapts. The scaler's state is part of a checkpoint, so a resumed run
  continues exactly.

The layers' numba kernels take the half-precision products widened to float32 at the kernel boundary
(:func:`gnnscale.nn.functional.kernel_input`); on a GPU the torch path computes in the autocast dtype.
Gradients are all-reduced (still scaled, in float32) before the optimizer step, so every worker unscales the
same sums and skips the same steps. The sampled evaluation runs under the same autocast as training (as
Lightning's precision plugins do); ``--eval full`` and ``gnnscale predict`` compute in float32.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor

PRECISIONS = ("32", "bf16-mixed", "16-mixed")
AUTOCAST_DTYPES = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def check_precision(precision: object) -> str:
    """``precision`` when it is one of :data:`PRECISIONS`, else ValueError naming the field."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    return precision


class StepPrecision:
    """What the training loop asks of a precision: the context of the forward pass and the loss, the backward
    pass and the optimizer step (through the gradient scaler for float16), and the scaler's state.

    Args:
        precision: one of :data:`PRECISIONS`.
        device: where the step runs (autocast's device type, and the scaler's).
    """

    def __init__(self, precision: str, device: torch.device) -> None:
        self.precision = check_precision(precision)
        self.device_type = device.type
        self.dtype = AUTOCAST_DTYPES[precision]
        self.scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None

    def autocast(self):
        """The context of a forward pass and its loss: autocast to the half dtype, or nothing for ``32``."""
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: Tensor) -> None:
        """``loss.backward()``, the loss scaled first with a scaler (the gradients then hold the scale)."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer step; with a scaler, on the unscaled gradients, skipped when they hold an inf or NaN,
        and the scale updated (no host sync on a GPU: fused Adam reads the scale and the overflow flag there)."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict | None:
        """The scaler's state (its scale and the steps since the last overflow), None without a scaler."""
        return None if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        """Restore :meth:`state_dict` (a checkpoint of a run of the same precision: its signature says so)."""
        if self.scaler is None:
            return
        if state is None:
            raise ValueError("checkpoint: holds no gradient scaler state, which --precision 16-mixed needs to "
                             "resume; it was written by a run of another --precision")
        self.scaler.load_state_dict(state)
