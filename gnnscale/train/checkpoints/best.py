"""The best-validation epoch and its weights, kept while training: what ``--save-model`` writes by default
(``RunOutputs.save_model_at="best"``), the epoch the report's ``final:`` line names.

Training goes on past the best epoch, so its weights are copied when it is reached (a ``state_dict``
copy, one model's memory) and travel in every checkpoint: a resumed run saves the weights an
uninterrupted one would.
"""

from __future__ import annotations

import math

import torch


def score_keys(entry: dict) -> tuple[str, str]:
    """The validation and test score keys of a history entry: ``val_acc``/``test_acc`` (node accuracy), or
    ``val_score``/``test_score`` where the entry names its ``metric`` (a link task)."""
    return ("val_score", "test_score") if "metric" in entry else ("val_acc", "test_acc")


def best_entry(history: list[dict]) -> dict:
    """The history entry of the best epoch: the highest validation score (accuracy, or a link task's metric) (model selection as in Kipf &
    Welling and Veličković et al.), the later epoch on a tie. NaN validation accuracy (no validation nodes,
    or no evaluation) never wins: then the last epoch."""
    scored = [h for h in history if not math.isnan(h[score_keys(h)[0]])] or history[-1:]
    return max(scored, key=lambda h: (h[score_keys(h)[0]], h["epoch"]))


def copy_state(state: dict) -> dict:
    """A copy that training does not change (``state_dict()`` holds the live tensors), on the CPU: a GPU
    keeps its memory for training, and the model file and checkpoints are written from host memory."""
    return {name: value.detach().to("cpu", copy=True) if isinstance(value, torch.Tensor) else value
            for name, value in state.items()}


class BestWeights:
    """The weights of the best epoch so far (None before any, or when a resumed checkpoint of an older
    gnnscale recorded none).

    Args:
        epoch: the epoch whose weights ``state`` holds.
        state: a copy of the model's ``state_dict()`` at the end of ``epoch``.
    """

    def __init__(self, epoch: int | None = None, state: dict | None = None) -> None:
        self.epoch, self.state = epoch, state

    def update(self, model: torch.nn.Module, history: list[dict]) -> None:
        """After an epoch (the last of ``history``): keep the model's weights if that epoch is the best."""
        epoch = history[-1]["epoch"]
        if best_entry(history)["epoch"] == epoch:
            self.epoch, self.state = epoch, copy_state(model.state_dict())

    def checkpoint_state(self, epoch: int, step: int) -> dict | None:
        """What a checkpoint at ``epoch``, ``step`` records. At the end of the best epoch the checkpoint's
        model is the best one: its weights are then left out (``model_state`` None), not written twice."""
        if self.epoch is None:
            return None
        if step == 0 and self.epoch == epoch - 1:
            return {"epoch": self.epoch, "model_state": None}
        return {"epoch": self.epoch, "model_state": self.state}

    @classmethod
    def from_checkpoint(cls, saved: dict | None, model_state: dict) -> "BestWeights":
        """The tracker a checkpoint's ``best`` entry (:meth:`checkpoint_state`) gives back; ``model_state``:
        the checkpoint's model."""
        if saved is None:
            return cls()
        state = saved["model_state"] if saved["model_state"] is not None else model_state
        return cls(int(saved["epoch"]), copy_state(state))
