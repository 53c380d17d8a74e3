"""Specifications of the one typed config: flags, defaults, config.json and --resume come from it."""

from __future__ import annotations

import argparse
import dataclasses
import json
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
    effect_of,
    flag,
    integer,
    number,
    parse_command_line,
    resume_config,
    run_folder,
)
from {{ cookiecutter.project_slug }}.config import setting as make_setting
from {{ cookiecutter.project_slug }}.engine.cli import prog
from {{ cookiecutter.project_slug }}.engine.runs import read_run

from conftest import FAST, start_module


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
    ("lr", None, "not a number"),  # None only where the default is None
    ("prefetch_factor", 0, "refused by --prefetch-factor: 0 is not in 1 .. 1024"),
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


# The checks behind the flags, made and called in the test as argparse calls them: the tests above
# reach them only through the settings made when config.py is imported.
@pytest.mark.parametrize("check, bounds, text, value", [
    (integer, (1,), "1", 1), (integer, (1,), "12", 12), (integer, (0,), "0", 0), (integer, (1, 4), "1", 1),
    (integer, (1, 4), "4", 4), (number, (0.0,), "1e-9", 1e-9), (number, (0.0, 1.0), "0.999", 0.999),
    (number, (0.0, float("inf"), True), "0", 0.0)])
def test_a_flags_check_takes_each_value_in_its_range_and_its_ends_as_they_are_written(check, bounds, text, value):
    parsed = check(*bounds)(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("check, bounds, text, refusal", [
    (integer, (1,), "0", "0 is not at least 1"), (integer, (0,), "-1", "-1 is not at least 0"),
    (integer, (1, 4), "5", "5 is not in 1 .. 4"), (integer, (1, 4), "0", "0 is not in 1 .. 4"),
    (integer, (1,), str(2**63), f"{2**63} is not in 1 .. {2**63 - 1}"),
    (integer, (1,), "1.5", "'1.5' is not an integer"), (integer, (1,), "", "'' is not an integer"),
    (number, (0.0,), "0", "0 is not in (0.0, inf)"), (number, (0.0, 1.0), "1", "1 is not in (0.0, 1.0)"),
    (number, (0.0, float("inf"), True), "-1e-9", "-1e-9 is not in [0.0, inf)"),
    (number, (0.0,), "nan", "nan is not in (0.0, inf)"), (number, (0.0,), "inf", "inf is not in (0.0, inf)"),
    (number, (0.0,), "x", "'x' is not a number")])
def test_a_flags_check_refuses_each_value_outside_its_range_in_one_line(check, bounds, text, refusal):
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        check(*bounds)(text)
    assert str(refused.value) == refusal


def test_a_setting_holds_its_default_help_check_choices_and_effect():
    made = make_setting(3, "what it sets", parse=integer(1), choices=("3", "4"), effect="machine")
    assert made.default == 3
    assert {key: made.metadata[key] for key in ("help", "choices", "effect")} == {
        "help": "what it sets", "choices": ("3", "4"), "effect": "machine"}
    assert made.metadata["parse"]("4") == 4
    assert make_setting(1, "h").metadata["effect"] == "weights" and make_setting(1, "h").metadata["parse"] is None
    with pytest.raises(AssertionError):
        make_setting(1, "h", effect="everything")  # a typo in config.py fails at import, not in a run
    assert [effect_of(field.name) for field in dataclasses.fields(Config)] == [
        field.metadata["effect"] for field in dataclasses.fields(Config)]


@pytest.mark.parametrize("settings, sentence", [
    (dict(persistent_workers=True), "--persistent-workers and --prefetch-factor need --num-workers above 0"),
    (dict(prefetch_factor=2), "--persistent-workers and --prefetch-factor need --num-workers above 0"),
    (dict(warmup_steps=5), "--warmup-steps is for the cosine and constant schedules (one-cycle warms up by itself)"),
    (dict(min_lr=0.001), "--min-lr and --decay-steps are for the cosine schedule: add --schedule cosine"),
    (dict(decay_steps=9), "--min-lr and --decay-steps are for the cosine schedule: add --schedule cosine"),
    (dict(schedule="cosine", lr=0.1, min_lr=0.2),
     "--min-lr 0.2 is above --lr 0.1: the cosine decays from --lr down to --min-lr"),
    (dict(schedule="cosine", warmup_steps=9, decay_steps=9),
     "--decay-steps 9 is not after --warmup-steps 9: the cosine decays from the end of the warm-up to step "
     "--decay-steps"),
    (dict(beta2=0.95), "--beta2 is AdamW's: add --optimizer adamw (SGD's one coefficient is --momentum)"),
    (dict(parallel="fsdp", precision="fp16"),
     "--precision fp16 needs a loss scale that all shards agree on, which this FSDP set-up does not have: use "
     "--precision bf16 (no loss scale needed) with --parallel fsdp"),
    (dict(parallel="fsdp", compile=True),
     "--compile is not set up for --parallel fsdp here: leave out --compile, or use --parallel ddp"),
    (dict(batch_size=10, accumulate=4),
     "--batch-size 10 is not a multiple of 1 process(es) x 4 micro-batch(es) per step, so they cannot share it "
     "equally"),
])
def test_each_contradiction_between_settings_is_one_sentence_that_says_what_to_do(settings, sentence):
    assert Config(**settings).problem() == sentence


def test_settings_at_the_edge_of_a_contradiction_are_accepted():
    assert Config(schedule="cosine", lr=0.1, min_lr=0.1).problem() is None  # decays to where it starts
    assert Config(schedule="cosine", warmup_steps=9, decay_steps=10).problem() is None
    assert Config(num_workers=1, persistent_workers=True, prefetch_factor=2).problem() is None
    assert Config(optimizer="adamw", beta2=0.95).problem() is None


def test_an_empty_out_and_a_config_json_of_unknown_settings_are_refused_in_one_line():
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        run_folder("  ")
    assert str(refused.value) == "is empty (an unset shell variable?): name the run folder"
    with pytest.raises(ValueError) as refused:
        Config.from_dict({**Config().to_dict(), "momentun": 0.9, "learning_rate": 0.1})
    assert str(refused.value) == "it has settings that this code does not know: learning_rate, momentun"


def test_the_help_names_the_command_each_flags_argument_and_what_each_option_of_a_run_does():
    """`python -m PACKAGE.train --help`: a setting's argument by its name (or its choices), a switch none."""
    parser = build_parser()
    text = " ".join(parser.format_help().split())
    assert parser.prog == prog("train") and text.startswith(f"usage: {prog('train')} ")
    assert parser.description == "Train the model reproducibly; every run writes a folder that records what it did."
    for setting in FLAGS:
        if isinstance(setting.default, bool):
            assert f"{flag(setting.name)} " in text and f"{flag(setting.name)} {setting.name.upper()}" not in text
        elif setting.metadata["choices"]:
            choices = "{" + ",".join(setting.metadata["choices"]) + "}"
            assert f"{flag(setting.name)} " + choices in text, setting.name
        else:
            assert f"{flag(setting.name)} {setting.name.upper()}" in text, setting.name
    for option in ("--out OUT run folder (default: runs/seed<SEED>)",
                   "--overwrite replace the run already in --out (default: off)",
                   "--resume continue the run in --out from its newest intact checkpoint (default: off)",
                   "--stop-after-steps N stop after N optimizer steps, with a checkpoint, as if interrupted (verify "
                   "and doctor use it to check the first steps of a long run) (default: none)"):
        assert option in text, option


def test_a_config_file_gives_the_settings_it_names_in_toml_or_json_and_a_typed_flag_overrides_it(tmp_path):
    (tmp_path / "run.toml").write_text('lr = 0.1\nepochs = 3\noptimizer = "adamw"\nweight-decay = 0.0\n')
    (tmp_path / "run.json").write_text(json.dumps({"lr": 0.1, "epochs": 3, "optimizer": "adamw",
                                                   "weight_decay": 0.0}))
    for name in ("run.toml", "run.json"):
        typed, _ = parse_command_line(["--config", str(tmp_path / name), "--epochs", "2"])
        assert typed == {"lr": 0.1, "epochs": 2, "optimizer": "adamw", "weight_decay": 0.0}, name
    # The negative control: without the file, only what is typed.
    assert parse_command_line(["--epochs", "2"])[0] == {"epochs": 2}


def test_a_whole_number_for_a_float_setting_is_recorded_as_its_flag_records_it(tmp_path):
    """`lr = 1` in a file and `--lr 1` typed give one config.json text, "lr": 1.0."""
    (tmp_path / "run.toml").write_text("lr = 1\nepochs = 3\n")
    from_file, _ = parse_command_line(["--config", str(tmp_path / "run.toml")])
    typed, _ = parse_command_line(["--lr", "1", "--epochs", "3"])
    assert json.dumps(from_file, sort_keys=True) == json.dumps(typed, sort_keys=True) == '{"epochs": 3, "lr": 1.0}'
    assert json.dumps(Config.from_dict({"lr": 1})[0].to_dict()) == json.dumps(Config(lr=1.0).to_dict())


@pytest.mark.parametrize("name, text, says", [
    ("run.toml", 'lr = "fast"\n', "its lr is 'fast', which is not a number"),
    ("run.toml", "learning_rate = 0.1\n", "it has settings that this code does not know: learning_rate"),
    ("run.toml", "seed = -1\n", "its seed is -1, which is refused by --seed"),
    ("run.toml", "lr = \n", "is not valid TOML"),
    ("run.yaml", "lr: 0.1\n", "is neither a .toml nor a .json file"),
    ("missing.json", None, "cannot be read"),
], ids=["a bad value", "an unknown name", "out of range", "not TOML", "another format", "missing"])
def test_a_config_file_with_a_mistake_gets_one_line_exit_2_and_no_run_folder(name, text, says, tmp_path, capsys):
    if text is not None:
        (tmp_path / name).write_text(text)
    with pytest.raises(SystemExit) as ended:
        parse_command_line(["--config", str(tmp_path / name), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and f"--config {tmp_path / name}: " in err and says in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_a_runs_own_config_json_trains_the_same_run_again_in_a_fresh_process(tmp_path):
    """`--config runs/A/config.json --out B` gives A's config.json, weights and every metrics row; the
    seed comes from the file alone, so the relaunch before torch must read it there too (the
    training process's hash seed is the file's seed, not the default's)."""
    first = start_module("train", "--out", str(tmp_path / "a"), *FAST, "--seed", "3", "--lr", "0.07",
                         log=tmp_path / "a.log")
    assert first.wait() == 0, first.stderr[-3000:]
    again = start_module("train", "--config", str(tmp_path / "a" / "config.json"), "--out", str(tmp_path / "b"),
                         log=tmp_path / "b.log")
    assert again.wait() == 0, again.stderr[-3000:]
    a, b = (read_run(tmp_path / name) for name in "ab")
    assert b.config == a.config and b.metrics == a.metrics and b.weights == a.weights
    assert b.environment["python_hash_seed"] == a.environment["python_hash_seed"] == "3"
