"""Every setting of a run, in one typed dataclass: the command line, its help and defaults, which
settings `--resume` may change, and config.json all come from `Config` below.

Equal settings (all but the execution-only ones) on an equal environment give equal weights.
To add a setting, add a field: it becomes a flag, is recorded in config.json, and is checked on
`--resume`.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import DEFAULT_SEED
from .utils.precision import PRECISIONS
from .utils.repro import DETERMINISM_MODES, MAX_SEED

PROG = "python -m {{ cookiecutter.project_slug }}.train"
DEVICE_PATTERN = r"auto|cpu|mps|cuda(:[0-9]+)?"


def integer(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is not " + (f"in {low} .. {high}" if high is not None
                                                                   else f"at least {low}"))
        return value
    return parse


def number(low: float, high: float = float("inf"), low_inclusive: bool = False):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (low <= value if low_inclusive else low < value) or not value < high:
            raise argparse.ArgumentTypeError(f"{text} is not in {'[' if low_inclusive else '('}{low}, {high})")
        return value
    return parse


def device_name(text: str) -> str:
    """'CPU', ' cuda:0 ' -> 'cpu', 'cuda:0': one spelling per device, so that config.json and
    `compare` see one setting, not two."""
    name = text.strip().lower()
    if not re.fullmatch(DEVICE_PATTERN, name):
        hint = " (one process uses one GPU; for several, launch with torchrun)" if "," in name else ""
        raise argparse.ArgumentTypeError(f"{text!r} is not one of auto, cpu, cuda, cuda:N, mps{hint}")
    return name


def setting(default: Any, help: str, parse=None, choices=None, execution_only: bool = False, flag: bool = True):
    """A field of Config. `execution_only`: changes how a run executes, not what it computes (the
    tests prove it), so `--resume` may change it. `flag=False`: fixed by the code or by torchrun."""
    return field(default=default, metadata={"help": help, "parse": parse, "choices": choices,
                                            "execution_only": execution_only, "flag": flag})


@dataclass(frozen=True)
class Config:
    seed: int = setting(DEFAULT_SEED, "seeds training: initial weights, dropout, shuffling, augmentation, and "
                        "PYTHONHASHSEED", integer(0, MAX_SEED))
    data_seed: int = setting(DEFAULT_SEED, "seeds the data: the synthetic images and the train/validation split; "
                             "it stays put when --seed changes, so runs are scored on the same samples",
                             integer(0, MAX_SEED))
    epochs: int = setting(5, "passes over the training set", integer(1))
    batch_size: int = setting(64, "samples per optimizer step in each process; under torchrun with N processes "
                              "a step sees N times this", integer(1))
    lr: float = setting(0.05, "peak learning rate of the one-cycle schedule", number(0))
    momentum: float = setting(0.9, "SGD momentum", number(0, 1, low_inclusive=True))
    weight_decay: float = setting(5e-4, "SGD weight decay (L2)", number(0, low_inclusive=True))
    width: int = setting(16, "channels of the first convolution (the example model)", integer(1))
    dropout: float = setting(0.25, "dropout probability (the example model)", number(0, 1, low_inclusive=True))
    val_batch_size: int = setting(256, "samples per evaluation batch", integer(1))
    threads: int = setting(1, "CPU threads for torch's intra-op parallelism; recorded because results can "
                           "depend on it (not the machine's core count)", integer(1))
    device: str = setting("auto", "auto, cpu, cuda, cuda:N or mps", device_name)
    deterministic: str = setting({{ cookiecutter.determinism|tojson }}, "strict: error on a non-deterministic op; "
                                 "warn: warn; off: PyTorch's fastest defaults", choices=DETERMINISM_MODES)
    precision: str = setting("fp32", "fp32; or mixed precision under torch.autocast: bf16, or fp16 with a "
                             "GradScaler", choices=PRECISIONS)
    compile: bool = setting(False, "wrap the model in torch.compile, set up to repeat bit for bit (needs a C++ "
                            "compiler on the CPU; the first steps compile, which takes a while)")
    eval_every: int = setting(1, "evaluate every K epochs (0: only at the end); trained weights do not depend "
                              "on it", integer(0))
    dataset: str = setting({{ cookiecutter.dataset|tojson }}, "the example data (fixed by the code)", flag=False)
    world_size: int = setting(1, "processes under torchrun (set by torchrun)", flag=False)
    num_workers: int = setting(0, "DataLoader worker processes; the result does not depend on it",
                               integer(0), execution_only=True)
    persistent_workers: bool = setting(False, "keep workers alive between epochs; the result does not depend "
                                       "on it", execution_only=True)
    prefetch_factor: int | None = setting(None, "batches each worker loads ahead; the result does not depend "
                                          "on it", integer(1), execution_only=True)
    tensorboard: bool = setting(False, "also write the metrics as TensorBoard event files into the run folder's "
                                "tensorboard/ (needs the tensorboard package)", execution_only=True)
    checkpoint_every: int = setting(50, "save a checkpoint every N optimizer steps, and at each epoch's end "
                                    "(0: epoch ends only)", integer(0), execution_only=True)

    def problem(self) -> str | None:
        """A contradiction between settings, as one sentence, or None."""
        if self.num_workers == 0 and (self.persistent_workers or self.prefetch_factor is not None):
            return "--persistent-workers and --prefetch-factor need --num-workers above 0"
        return None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Config:
        """The config a run recorded; ValueError (one line) if it does not fit this code."""
        known = {f.name for f in fields(cls)}
        unknown, missing = sorted(data.keys() - known), sorted(known - data.keys())
        if unknown or missing:
            raise ValueError(f"its settings do not match this code's (unknown: {unknown or 'none'}; "
                             f"missing: {missing or 'none'})")
        return cls(**data)


EXECUTION_ONLY = tuple(f.name for f in fields(Config) if f.metadata["execution_only"])
FLAGS = tuple(f for f in fields(Config) if f.metadata["flag"])


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Train the model reproducibly; every run writes a "
                                     "folder that records what it did.",
                                     allow_abbrev=False)  # --epoch must not quietly mean --epochs
    # Settings: a flag not typed is absent from the result (SUPPRESS), so that --resume can tell
    # what the user typed from what the defaults say.
    for setting_field in FLAGS:
        meta, default = setting_field.metadata, setting_field.default
        options = {"default": argparse.SUPPRESS, "help": f"{meta['help']} (default: {default})"}
        if isinstance(default, bool):
            parser.add_argument(flag(setting_field.name), action="store_true", **options)
        else:
            metavar = None if meta["choices"] else setting_field.name.upper()
            parser.add_argument(flag(setting_field.name), type=meta["parse"], choices=meta["choices"],
                                metavar=metavar, **options)
    # How to run, not what to compute: never part of the config.
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: runs/seed<SEED>)")
    parser.add_argument("--overwrite", action="store_true", help="replace the run already in --out (default: off)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its newest intact checkpoint (default: off)")
    parser.add_argument("--stop-after-steps", type=integer(1), default=None, metavar="N",
                        help="stop after N optimizer steps, with a checkpoint, as if interrupted (verify and "
                             "doctor use it to check the first steps of a long run) (default: none)")
    # One clear line and exit 2 for a user's mistake, instead of the usage block.
    parser.error = lambda message: parser.exit(2, f"{PROG}: error: {message}\n")
    return parser


def parse_command_line(argv: list[str] | None) -> tuple[dict, argparse.Namespace]:
    """(the settings the user typed, every flag's value): SystemExit(2) with one line on a mistake."""
    args = build_parser().parse_args(argv)
    typed = {f.name: getattr(args, f.name) for f in FLAGS if hasattr(args, f.name)}
    return typed, args


def resume_config(recorded: Config, typed: dict, world_size: int) -> tuple[Config, list[str]]:
    """The config to resume with, and the typed settings (and world size) that contradict the
    recorded run. Execution-only settings may change; untyped ones keep their recorded values."""
    changes = {name: value for name, value in typed.items() if name in EXECUTION_ONLY}
    asked = {**typed, "world_size": world_size}
    differing = [f"{name} (recorded {getattr(recorded, name)!r}, given {value!r})"
                 for name, value in asked.items() if name not in EXECUTION_ONLY and getattr(recorded, name) != value]
    return Config(**{**recorded.to_dict(), **changes}), differing


def config_to_flags(config: Config) -> list[str]:
    """The command-line flags that reproduce `config` (the world size is torchrun's to set)."""
    result = []
    for setting_field in FLAGS:
        value = getattr(config, setting_field.name)
        if isinstance(value, bool):
            result += [flag(setting_field.name)] if value else []
        elif value is not None:
            result += [flag(setting_field.name), str(value)]
    return result

