"""One source for every setting: the flags of every command are its config dataclasses' fields, their
defaults the fields' defaults."""

from __future__ import annotations

import dataclasses

import pytest

from gnnscale.cli import build_parser
from gnnscale.cli.convert import ConvertConfig, read_convert_config
from gnnscale.cli.entry import command_settings, subcommand_parser
from gnnscale.cli.flags import given, read_settings
from gnnscale.cli.generate import GenerateConfig, read_generate_config
from gnnscale.cli.partition import PartitionSettings, read_partition_settings
from gnnscale.cli.predict import PredictConfig, read_predict_config
from gnnscale.cli.reference import subcommands
from gnnscale.cli.train import read_train_settings, settings_classes
from gnnscale.nn import ModelConfig
from gnnscale.sampling.registry import SAMPLERS, check_sampler_fits_model, sampler_spec
from gnnscale.settings import flag_fields, flag_names, option_string
from gnnscale.train.checkpoints.files import check_same_settings, flag_of
from gnnscale.train.config import TrainConfig
from gnnscale.train.checkpoints.runs import RESUMABLE_CHANGES
from gnnscale.train.layouts import LAYOUTS, layout_options
from gnnscale.train.layouts.dgs_config import DGSConfig
from gnnscale.train.layouts.registry import layouts_with
from gnnscale.train.tasks.link_config import LinkConfig
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
    if field.name == "relation_fanouts":  # words, each a relation and its fanouts
        return [name, "cites=7,3", "writes=2"], ("cites=7,3", "writes=2")
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
    distributed = read_train_settings(build_parser().parse_args(["train", "--partitions", "P", "--layout", "vanilla",
                                                                 "--dgs"]))
    assert distributed.layout == layout_options("vanilla", dgs=DGSConfig())


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


# --- every command's defaults are its configs' ----------------------------------------------------------
#
# For every command: a command line with only its required flags, what the command builds from it (the
# same function cmd_* calls), and the config objects in it. Each must equal its class built with only the
# required values: a default the command writes by hand (a flag's own default, a `value or "x"`) that
# differs from the field's fails here, for every field, a new one included.

def parsed(*argv: str):
    return build_parser().parse_args(list(argv))


def train_built(*extra: str) -> dict[type, object]:
    settings = read_train_settings(parsed("train", *extra))
    model = ModelConfig(in_dim=1, num_classes=2, num_layers=settings.train.num_layers, **settings.model)
    built = {TrainConfig: settings.train, RunOutputs: settings.outputs, ModelConfig: model}
    if settings.task_settings is not None:
        built[type(settings.task_settings)] = settings.task_settings
    if settings.layout is not None:
        built[type(settings.layout.settings)] = settings.layout.settings
        if settings.layout.dgs is not None:
            built[DGSConfig] = settings.layout.dgs
    return built


REQUIRED = {ModelConfig: dict(in_dim=1, num_classes=2, num_layers=2), PartitionSettings: dict(parts=2, out="P"),
            PredictConfig: dict(model="m.pt", out="O"), GenerateConfig: dict(preset="papers100M", scale=1e-4, out="G"),
            ConvertConfig: dict(out="C")}


def bare_command_lines() -> list[tuple[str, dict[type, object]]]:
    """(command, {class: what the command built}) for bare command lines that reach every config class."""
    dgs_layout = layouts_with("dgs").split(" or ")[0]
    runs = [("train", train_built()), ("train", train_built("--task", "link")),
            ("train", train_built("--partitions", "P", "--layout", dgs_layout, "--dgs"))]
    for name, spec in LAYOUTS.items():
        # A layout that does not sample with the default sampler is read with one it does; its TrainConfig is
        # then not the default one, and is left out.
        other = () if TrainConfig().sampler in spec.samplers else ("--sampler", spec.samplers[0])
        built = train_built("--partitions", "P", "--layout", name, *other)
        runs.append(("train", {cls: made for cls, made in built.items() if not (other and cls is TrainConfig)}))
    runs += [("partition", {PartitionSettings: read_partition_settings(parsed("partition", "--parts", "2", "--out",
                                                                              "P"))}),
             ("predict", {PredictConfig: read_predict_config(parsed("predict", "--model", "m.pt", "--out", "O"))}),
             ("generate", {GenerateConfig: read_generate_config(parsed("generate", "--preset", "papers100M", "--scale",
                                                                       "1e-4", "--out", "G"))}),
             ("convert", {ConvertConfig: read_convert_config(parsed("convert", "--out", "C"))})]
    return runs


def test_every_commands_defaults_are_its_config_dataclasses_defaults():
    runs = bare_command_lines()
    commands = set(subcommands(build_parser())) - {"info"}  # info takes the dataset flags only
    assert {command for command, _ in runs} == commands, "a command without a row here"
    for command in commands:
        reached = {cls for name, built in runs if name == command for cls in built}
        assert reached == set(command_settings(command)), (command, reached ^ set(command_settings(command)))
    for command, built in runs:
        for cls, made in built.items():
            required = REQUIRED.get(cls, {})
            for field, _ in flag_fields(cls):
                if field.name not in required:
                    value = getattr(made, field.name)
                    assert value == field.default, f"gnnscale {command} passes {cls.__name__}.{field.name}={value!r} " \
                                                   f"without its flag, the field's default is {field.default!r}"
            assert made == cls(**required), f"gnnscale {command}: {made} != {cls(**required)}"  # unflagged fields too


def test_a_command_default_written_by_hand_is_caught(monkeypatch):
    """The check above, against the kind of duplicate it is for: `--task link` without --metric passing a
    metric of its own rather than LinkConfig's."""
    real = read_settings

    def hand_default(cls, args, **fixed):
        return real(cls, args, **({"metric": "ap"} if cls is LinkConfig else {}), **fixed)

    monkeypatch.setattr("gnnscale.cli.train.read_settings", hand_default)
    with pytest.raises(AssertionError, match=r"LinkConfig\(.*metric='ap'"):
        test_every_commands_defaults_are_its_config_dataclasses_defaults()


def test_resumable_changes_are_the_fields_that_say_so():
    assert RESUMABLE_CHANGES == tuple(f.name for f, flag in flag_fields(TrainConfig) if flag.resumable)
    assert set(RESUMABLE_CHANGES) == {"epochs", "threads", "prefetch", "device", "sample_on", "gpu_cache_fraction"}


def test_device_and_threads_are_one_setting_in_every_command():
    """--device and --threads: the same default, help and check in train and predict (declared once)."""
    for name in ("device", "threads"):
        train, predict = (next(f for f, _ in flag_fields(cls) if f.name == name)
                          for cls in (TrainConfig, PredictConfig))
        assert train.default == predict.default
        assert train.metadata["flag"].help.startswith(predict.metadata["flag"].help.split(";")[0])
    for cls, required in ((TrainConfig, {}), (PredictConfig, REQUIRED[PredictConfig])):
        with pytest.raises(ValueError, match=r"^threads: expected an int >= 1, got 0$"):
            cls(**required, threads=0)
        with pytest.raises(ValueError, match=r"^device: expected cpu, cuda, cuda:N or auto, got 'tpu'$"):
            cls(**required, device="tpu")
