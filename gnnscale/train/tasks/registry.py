"""The registry of tasks: the one place that knows every task by name (``--task``, ``fit(..., task=...)``).

The CLI's ``--task`` choices and flags, the checks of which layouts serve a task, the checkpoint identity
and the metrics file's header are all read from here. Adding a task is one module (a
:class:`~gnnscale.train.tasks.base.TaskSpec` and its task) and one line in :data:`TASKS`.
"""

from __future__ import annotations

from dataclasses import asdict

from gnnscale.train.tasks.base import TaskSpec
from gnnscale.train.tasks.link import LINK
from gnnscale.train.tasks.node import NODE

TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (NODE, LINK)}
DEFAULT_TASK = NODE.name


def task_spec(name: str) -> TaskSpec:
    """The registered task called ``name`` (``--task``)."""
    if name not in TASKS:
        raise ValueError(f"task: expected one of {', '.join(TASKS)}, got {name!r}")
    return TASKS[name]


def task_settings_classes() -> tuple[type, ...]:
    """Every task's own settings dataclass, in registry order (the CLI's task flags)."""
    return tuple(spec.config for spec in TASKS.values() if spec.config is not None)


def task_of(task: str | object | None) -> tuple[TaskSpec, object | None]:
    """``fit``'s ``task`` argument as a spec and its settings: None or a name (the task's default settings), or
    an instance of a task's settings class (``LinkConfig(...)``)."""
    if task is None:
        task = DEFAULT_TASK
    names = ", ".join(repr(name) for name in TASKS)
    configs = " or a ".join(spec.config.__name__ for spec in TASKS.values() if spec.config is not None)
    if isinstance(task, str):
        if task not in TASKS:
            raise ValueError(f"task: expected {names} or a {configs}, got {task!r}")
        spec = TASKS[task]
        return spec, None if spec.config is None else spec.config()
    for spec in TASKS.values():
        if spec.config is not None and isinstance(task, spec.config):
            return spec, task
    raise TypeError(f"task: expected {names} or a {configs}, got {task!r}")


def task_signature(model_signature: dict, spec: TaskSpec, settings: object | None) -> dict:
    """The model's checkpoint signature with the task's own settings (each changes the numbers)."""
    if settings is None:
        return model_signature
    return {**model_signature, spec.name: asdict(settings)}


def task_header(spec: TaskSpec, settings: object | None) -> dict:
    """What the metrics file says of the task (nothing for a task without settings: node classification)."""
    return {} if settings is None else {"task": spec.name, spec.name: asdict(settings)}
