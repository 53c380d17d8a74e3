"""Specifications of the one typed config: flags, defaults, config.json and --resume come from it."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }}.config import (
    EFFECTS,
    EXECUTION_ONLY,
    FLAGS,
    Config,
    build_parser,
    config_to_flags,
    parse_command_line,
    resume_config,
)


def test_every_flag_shows_its_default_in_help():
    text = " ".join(build_parser().format_help().split())
    for setting in FLAGS:
        assert f"--{setting.name.replace('_', '-')}" in text
        assert f"(default: {setting.default})" in text, setting.name
    for action in build_parser()._actions:  # --out, --resume and the others too
        assert action.dest == "help" or "(default: " in action.help, action.dest


def test_every_flag_is_in_the_readme_table_with_its_default():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for setting in FLAGS:
        row = f"| `--{setting.name.replace('_', '-')}` | "
        assert row in readme, setting.name
        if setting.default is not None:  # None reads "torch's" default, in the README's language
            shown = "off" if setting.default is False else str(setting.default)
            assert f"{row}{shown} |" in readme, setting.name


def test_only_settings_that_change_no_result_may_change_on_resume():
    """These are "execution" settings (tests/test_settings.py shows each leaves the weights, and
    perturbs any you add); every other setting is kept on --resume."""
    assert {"num_workers", "persistent_workers", "prefetch_factor", "checkpoint_every", "tensorboard",
            "log_every"} <= set(EXECUTION_ONLY)
    assert not {"seed", "lr", "precision", "device", "parallel", "nonfinite"} & set(EXECUTION_ONLY)


def test_the_hidden_constants_of_the_recipe_are_recorded_settings():
    names = {field.name for field in dataclasses.fields(Config)}
    assert {"momentum", "weight_decay", "width", "dropout", "val_batch_size", "data_seed"} <= names


def test_config_json_round_trips_and_refuses_settings_this_code_does_not_know():
    config = Config(seed=3, lr=0.1, num_workers=2)
    assert Config.from_dict(config.to_dict()) == (config, [])
    with pytest.raises(ValueError, match="settings that this code does not know: colour"):
        Config.from_dict({**config.to_dict(), "colour": "blue"})


def test_a_config_json_that_records_a_retired_setting_is_read_without_it():
    """Runs recorded by an earlier version (the example's `dataset`, now task.py's) still resume."""
    config = Config(seed=3)
    assert Config.from_dict({**config.to_dict(), "dataset": "synthetic"}) == (config, [])


@pytest.mark.parametrize("name, value, reason", [
    ("lr", "fast", "not a number"),
    ("lr", 0, "refused by --lr: 0 is not in (0, inf)"),
    ("epochs", 0, "refused by --epochs: 0 is not at least 1"),
    ("seed", 1.5, "not an integer"),
    ("num_workers", True, "not an integer"),
    ("compile", "yes", "not true or false"),
    ("optimizer", "adam", "not one of sgd, adamw"),
    ("device", "cuda:1,2", "refused by --device: 'cuda:1,2' is not one of auto, cpu, cuda, cuda:N, mps"),
    ("parallel", 3, "not a string"),
])
def test_a_hand_edited_config_json_with_a_value_its_flag_would_refuse_is_refused_in_one_line(name, value, reason):
    with pytest.raises(ValueError) as error:
        Config.from_dict({**Config().to_dict(), name: value})
    assert str(error.value).startswith(f"its {name} is {value!r}, which is {reason}")
    assert "\n" not in str(error.value)


def test_every_value_a_flag_takes_is_accepted_from_config_json():
    """The negative control of the test above: what the command line accepts, config.json does."""
    typed, _ = parse_command_line(["--lr", "1", "--prefetch-factor", "2", "--num-workers", "1", "--compile",
                                   "--device", "CPU", "--optimizer", "adamw"])
    config = Config(**typed)
    assert Config.from_dict(config.to_dict()) == (config, [])
    assert Config.from_dict({**Config().to_dict(), "lr": 1})[0].lr == 1  # an integer where a number goes


def test_a_config_recorded_before_a_setting_existed_takes_its_default_and_says_which():
    old = {k: v for k, v in Config(seed=3).to_dict().items() if k not in ("clip_grad_norm", "accumulate")}
    config, added = Config.from_dict(old)
    assert added == ["accumulate", "clip_grad_norm"] and config == Config(seed=3)


def test_the_flags_of_a_config_parse_back_to_the_same_config():
    config = Config(seed=9, data_seed=1, lr=0.125, dropout=0.0, num_workers=2, persistent_workers=True,
                    prefetch_factor=3, device="cpu")
    typed, _ = parse_command_line(config_to_flags(config))
    assert Config(**typed) == config


def test_the_flags_of_a_config_give_back_every_float_setting_bit_for_bit():
    """verify and doctor re-run a run from the flags of its config.json: a float written short
    (0.05 for the float next to it) would re-run another config, whose weights differ. Every float
    setting, a task's own too, at a value that takes all 17 digits to write: its default's
    neighbour towards 0 (a third of a thousandth where the default is 0)."""
    floats = [field for field in dataclasses.fields(Config) if field.type in (float, "float")]
    values = {field.name: math.nextafter(field.default, 0.0) if field.default else 1 / 3000 for field in floats}
    assert {"lr", "min_lr", "momentum", "beta2", "dropout"} <= set(values)
    config = Config(optimizer="adamw", schedule="cosine", **values)  # beta2 is AdamW's, min_lr the cosine's
    assert config.problem() is None and all(len(repr(value)) > 12 for value in values.values())
    typed, _ = parse_command_line(config_to_flags(config))
    assert Config(**typed) == config


def test_resume_takes_untyped_settings_from_the_record_and_refuses_contradictions():
    recorded = Config(seed=7, epochs=2)
    config, differing = resume_config(recorded, {"num_workers": 3}, world_size=1)
    assert config == dataclasses.replace(recorded, num_workers=3) and differing == []
    _, differing = resume_config(recorded, {"epochs": 3, "seed": 7, "parallel": "fsdp"}, world_size=1)
    assert differing == ["epochs (recorded 2, given 3)", "parallel (recorded 'ddp', given 'fsdp')"]


def test_resume_may_change_the_world_size_and_the_config_then_holds_the_new_one():
    """The run folder records the change (world_sizes.json; tests/test_fsdp.py resumes such runs)."""
    config, differing = resume_config(Config(seed=7, world_size=2), {}, world_size=3)
    assert differing == [] and config == Config(seed=7, world_size=3)


@pytest.mark.parametrize("settings, problem", [(dict(precision="fp16"), "use --precision bf16"),
                                               (dict(compile=True), "leave out --compile")])
def test_fsdp_refuses_what_it_is_not_set_up_for_in_one_line(settings, problem):
    assert problem in Config(parallel="fsdp", world_size=2, **settings).problem()
    assert Config(parallel="ddp", world_size=2, **settings).problem() is None


def test_every_setting_says_what_it_affects():
    for setting in dataclasses.fields(Config):
        assert setting.metadata["effect"] in EFFECTS, setting.name


@pytest.mark.parametrize("world_size, accumulate, batch, micro", [(1, 1, 64, 64), (2, 1, 64, 32), (2, 4, 64, 8),
                                                                  (3, 1, 48, 16)])
def test_the_global_batch_is_shared_by_processes_and_micro_batches(world_size, accumulate, batch, micro):
    config = Config(batch_size=batch, world_size=world_size, accumulate=accumulate)
    assert config.micro_batch_size == micro and config.problem() is None
    assert "not a multiple of" in Config(batch_size=batch + 1, world_size=2, accumulate=accumulate).problem()
