"""One source for every setting: the flags of ``gnnscale train`` are the config dataclasses' fields."""

from __future__ import annotations

import dataclasses

import pytest

from gnnscale.cli import build_parser
from gnnscale.cli.entry import subcommand_parser
from gnnscale.cli.flags import given
from gnnscale.cli.train import read_train_settings, settings_classes
from gnnscale.nn import ModelConfig
from gnnscale.sampling.registry import SAMPLERS, check_sampler_fits_model, sampler_spec
from gnnscale.settings import flag_fields, flag_names, option_string
from gnnscale.train.checkpoint import check_same_settings, flag_of
from gnnscale.train.config import TrainConfig
from gnnscale.train.layouts import LAYOUTS, layout_options
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.layouts.split import SplitOptions
from gnnscale.train.run import RunOutputs

TRAIN = subcommand_parser(build_parser(), "train")


def a_value_other_than(cls: type, field: dataclasses.Field, flag) -> tuple[list[str], object]:
    """Command-line words that set ``field`` to a value other than its default, and that value."""
    name = option_string(cls, field, flag)
    choices = flag.allowed()
    if choices:
        value = next(c for c in choices if c != field.default)
        return [name, str(value)], value
    if isinstance(field.default, bool):
        return [name], not field.default
    if isinstance(field.default, tuple) or field.name == "eval_fanouts":
        return [name, "7,3"], (7, 3)
    if isinstance(field.default, float):
        return [name, "0.25"], 0.25
    if field.name in ("metrics_out", "model_out", "checkpoint", "link_split"):
        return [name, "f.out"], "f.out"
    if field.name == "device":  # a device name, checked when read (and resolved when the run starts)
        return [name, "auto"], "auto"
    return [name, "3"], 3


@pytest.mark.parametrize("cls", settings_classes(), ids=lambda cls: cls.__name__)
def test_every_flagged_field_is_a_train_flag_that_reaches_its_field(cls):
    strings = {s for action in TRAIN._actions for s in action.option_strings}
    for field, flag in flag_fields(cls):
        words, value = a_value_other_than(cls, field, flag)
        assert words[0] in strings, f"{cls.__name__}.{field.name} has no flag"
        args = TRAIN.parse_args(words)
        assert given(cls, args) == {field.name: value}, (words, given(cls, args))


def test_untyped_flags_leave_every_config_at_its_dataclass_default():
    settings = read_train_settings(build_parser().parse_args(["train"]))
    assert settings.train == TrainConfig() and settings.outputs == RunOutputs() and settings.layout is None
    defaults = {f.name: f.default for f, _ in flag_fields(ModelConfig)}
    assert settings.model == {**defaults, "out_heads": 1}
    distributed = read_train_settings(build_parser().parse_args(["train", "--partitions", "P", "--layout", "split",
                                                                 "--dgs"]))
    assert distributed.layout == layout_options("split", dgs=DGSConfig())


def test_a_negative_fanout_reads_as_the_flags_value():
    for argv, fanouts in ((["--fanouts", "-1,5"], (-1, 5)), (["--fanouts", "-1"], (-1,)), (["--fanouts=0,3"], (0, 3))):
        assert read_train_settings(build_parser().parse_args(["train", *argv])).train.fanouts == fanouts


def test_a_layout_option_reaches_the_layout_and_every_layout_option_is_owned():
    args = build_parser().parse_args(["train", "--partitions", "P", "--layout", "split", "--shuffle-dtype", "bfloat16"])
    assert read_train_settings(args).layout.settings == SplitOptions(shuffle_dtype="bfloat16")
    owned = {f.name for spec in LAYOUTS.values() for f in dataclasses.fields(spec.options)}
    assert owned == {"cache_fraction", "split_sampling", "shuffle_dtype", "replication"}
    with pytest.raises(ValueError, match=r"^shuffle_dtype: applies to --layout split, got --layout hybrid$"):
        layout_options("hybrid", shuffle_dtype="bfloat16")
    with pytest.raises(ValueError, match=r"^fanouts: is no layout option, got --layout hybrid$"):
        layout_options("hybrid", fanouts=(3,))


def test_a_changed_setting_in_a_checkpoint_names_the_flag_made_from_its_field():
    for section, cls in (("train", TrainConfig), ("model", ModelConfig), ("dgs", DGSConfig),
                         ("layout_options", SplitOptions)):
        for name, flag in flag_names(cls).items():
            if name in {f.name for f in dataclasses.fields(cls)}:
                assert flag_of(f"{section}.{name}") == flag
    saved = {"layout_options": {"split_sampling": "owner", "shuffle_dtype": "float32"}}
    now = {"layout_options": {"split_sampling": "owner", "shuffle_dtype": "bfloat16"}}
    with pytest.raises(ValueError, match=r"written with layout_options.shuffle_dtype='float32', this run has "
                                         r"layout_options.shuffle_dtype='bfloat16'; resume with the same --shuffle-dtype"):
        check_same_settings("run.ckpt", saved, now)


def test_the_sampler_registry_says_what_each_sampler_serves():
    assert list(SAMPLERS) == ["fused", "two_step", "matrix", "ladies"]
    assert [name for name, spec in SAMPLERS.items() if spec.bulk] == ["matrix", "ladies"]
    with pytest.raises(ValueError, match=r"^sampler: expected one of fused, two_step, matrix, ladies, got 'gibbs'$"):
        sampler_spec("gibbs")
    with pytest.raises(ValueError, match=r"^sampler: --sampler ladies trains --model sage or gcn, not --model gat"):
        check_sampler_fits_model("ladies", "gat")
    check_sampler_fits_model("ladies", None)  # a model of one's own: checked by its input form instead
    with pytest.raises(ValueError, match=r"^layer_size: --layer-size applies to --sampler ladies, got sampler 'matrix'"):
        TrainConfig(sampler="matrix", layer_size=8)
    with pytest.raises(ValueError, match=r"^bulk: --bulk 2 needs --sampler matrix or ladies"):
        TrainConfig(bulk=2)
