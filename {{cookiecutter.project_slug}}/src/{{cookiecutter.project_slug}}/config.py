"""Every setting of a run, in one typed dataclass: the command line, its help and defaults, which
settings `--resume` may change, and config.json all come from `Config` below. `--config FILE` gives
settings from a .toml or .json file of config.json's names; a flag typed beside it wins.

Equal settings on an equal environment give equal weights. To add a setting, add a field: it
becomes a flag, is recorded in config.json, and is checked on `--resume`. Say what it affects
(`effect`), and tests/test_settings.py checks that a "weights" setting changes the weights.
A run recorded before the field existed takes its default (`Config.from_dict`).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import DEFAULT_SEED
from .engine.cli import LOG_LEVELS, make_parser
from .engine.precision import PRECISIONS
from .engine.startup import CPU_KERNEL_MODES, read_settings_file
from .utils.device import device_name
from .utils.repro import DETERMINISM_MODES, MAX_SEED

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("one-cycle", "cosine", "constant")
PARALLEL = ("ddp", "fsdp")
NONFINITE = ("stop", "skip")
DECAY_ON = ("all", "weights")
# What a setting affects. "weights": another value gives other weights (tests/test_settings.py
# proves it for each); "evaluation": the trained weights stay, the validation figures may change;
# "machine": whether it changes bits depends on the hardware and its software (GPU kernels, thread
# splits, the order in which collectives add up), so it is recorded and kept on --resume;
# "execution": how a run executes, not what it computes (the tests prove it), so --resume may
# change it; "failure": what a run does when a step fails (its weights change only if one does),
# kept on --resume; "fixed": set by the code or by torchrun, not a flag.
EFFECTS = ("weights", "evaluation", "machine", "execution", "failure", "fixed")
# Settings that earlier versions recorded and this one no longer has: a config.json that holds one
# is read without it (what it chose is now fixed elsewhere, as its note says).
RETIRED = {"dataset": "the example's data, now task.py's DATASET"}
# More intra-op threads than any machine has cores only oversubscribes it (10000 started 15,355
# threads and stalled a two-core machine); a run asking for more than this one has is warned.
MAX_THREADS = 512


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


def run_folder(text: str) -> Path:
    """--out: a path; an empty one (an unset shell variable, `--out "$RUN"`) would be the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?): name the run folder")
    return Path(text)


def weights_file(text: str) -> str:
    """--init-from: none, or a file's path, recorded absolute so that verify finds it from any folder
    (whether it holds weights that fit is checked as the run starts: plan.init_weights_problem)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give a model.pt, best.pt or checkpoint file, or none")
    return text if text == "none" else str(Path(text).expanduser().absolute())


def best_figure(text: str) -> str:
    """--keep-best: off, or min:NAME or max:NAME, NAME one of the task's figures (checked once the
    task is built: plan.keep_best_problem)."""
    mode, _, name = text.partition(":")
    if text != "off" and (mode not in ("min", "max") or not name.isidentifier()):
        raise argparse.ArgumentTypeError(f"{text!r} is not off, min:NAME or max:NAME (min:loss, max:accuracy)")
    return text


def parse_device(text: str) -> str:
    try:
        return device_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def setting(default: Any, help: str, parse=None, choices=None, effect: str = "weights"):
    """A field of Config; `effect` says what it changes (see EFFECTS)."""
    assert effect in EFFECTS, effect
    return field(default=default, metadata={"help": help, "parse": parse, "choices": choices, "effect": effect})


@dataclass(frozen=True)
class Config:
    # What is learned, and from what.
    seed: int = setting(DEFAULT_SEED, "seeds training: initial weights, dropout, shuffling, augmentation, and "
                        "PYTHONHASHSEED", integer(0, MAX_SEED))
    data_seed: int = setting(DEFAULT_SEED, "seeds the data: the example's synthetic images and its train/validation "
                             "split; it stays put when --seed changes, so runs are scored on the same samples",
                             integer(0, MAX_SEED))
    epochs: int = setting(5, "passes over the training set", integer(1))
    max_steps: int = setting(0, "the run's length in optimizer steps instead (nanoGPT's max_iters): it ends after N "
                             "steps, its last epoch cut short where N falls, and the schedule spans the N steps; "
                             "--epochs is then not used (0: --epochs whole epochs)", integer(0))
    batch_size: int = setting(64, "samples per optimizer step, over all processes and micro-batches (the global "
                              "batch); each process takes batch-size / (processes x accumulate) at a time",
                              integer(1))
    accumulate: int = setting(1, "micro-batches whose gradients add up to one optimizer step (gradient "
                              "accumulation)", integer(1))
    max_samples: int = setting(0, "train and evaluate on only the first N samples of each split (0: all of them), "
                               "for quick checks; the tests use it", integer(0))
    # How it is learned.
    optimizer: str = setting("sgd", "sgd (with momentum) or adamw", choices=OPTIMIZERS)
    lr: float = setting(0.05, "peak learning rate of the schedule", number(0))
    schedule: str = setting("one-cycle", "learning rate over the run: one-cycle (warm up, then anneal), cosine "
                            "(after --warmup-steps of linear warm-up) or constant (likewise)", choices=SCHEDULES)
    warmup_steps: int = setting(0, "steps of linear warm-up for the cosine and constant schedules", integer(0))
    min_lr: float = setting(0.0, "the learning rate that the cosine schedule decays to (nanoGPT's min_lr)",
                            number(0, low_inclusive=True))
    decay_steps: int = setting(0, "the step at which the cosine schedule reaches --min-lr, counted from the first "
                               "step, warm-up included (nanoGPT's lr_decay_iters); later steps keep --min-lr (0: "
                               "the run's last step)", integer(0))
    momentum: float = setting(0.9, "SGD's momentum, or AdamW's beta1", number(0, 1, low_inclusive=True))
    beta2: float = setting(0.999, "AdamW's beta2 (nanoGPT: 0.95, or 0.99 for small data)", number(0, 1))
    weight_decay: float = setting(5e-4, "weight decay (SGD: L2; AdamW: decoupled)", number(0, low_inclusive=True))
    weight_decay_on: str = setting("all", "the parameters that weight decay applies to: all, or weights (biases, "
                                   "norms and embeddings exempt, as in nanoGPT; the rule is in engine/optim.py, and "
                                   "a task's own parameter_groups replace it)", choices=DECAY_ON)
    clip_grad_norm: float = setting(0.0, "clip the gradients' total norm to this before each step (0: no clipping)",
                                    number(0, low_inclusive=True))
    nonfinite: str = setting("stop", "a step whose loss or gradients are not finite (NaN, inf): stop (the run ends at "
                             "that step, naming it and its samples; its checkpoints from before stand) or skip (the "
                             "step is not taken, as fp16's GradScaler skips an overflow; costs a wait for the device "
                             "each step)", choices=NONFINITE, effect="failure")
    init_from: str = setting("none", "start from the weights in this file, a run's model.pt, best.pt or a checkpoint "
                             "(checkpoints/step-N.pt), instead of the task's initial ones; the optimizer and "
                             "the schedule start afresh (fine-tuning). Recorded with the file's weights_sha256",
                             weights_file)
    init_from_sha256: str = setting("", "the weights_sha256 of --init-from's weights, recorded as the run starts",
                                    effect="fixed")
    # The example model's size; a task of your own may read them too.
    width: int = setting(16, "the model's width (the example: channels of its first convolution)", integer(1))
    dropout: float = setting(0.25, "dropout probability", number(0, 1, low_inclusive=True))
    # Evaluation: it never changes the trained weights.
    val_batch_size: int = setting(256, "samples per evaluation batch (each process)", integer(1), effect="evaluation")
    eval_every: int = setting(1, "evaluate every K epochs (0: only at the end)", integer(0), effect="evaluation")
    eval_every_steps: int = setting(0, "also evaluate every N optimizer steps, in the middle of epochs (nanoGPT's "
                                    "eval_interval; 0: only where --eval-every says)", integer(0), effect="evaluation")
    eval_batches: int = setting(0, "score every evaluation of the run on K x --val-batch-size samples of the "
                                "validation split, the same ones each time, drawn by --data-seed (nanoGPT's "
                                "eval_iters; 0: the whole split)", integer(0), effect="evaluation")
    # Early stopping ends the run by what the evaluations say: with it, when and on what they score
    # changes the weights (those settings are kept on --resume in any case).
    early_stop: int = setting(0, "stop the run once PATIENCE evaluations in a row have not beaten the best one that "
                              "--keep-best watches (0: never); summary.json records where it stopped", integer(0))
    # The machine.
    threads: int = setting(1, "CPU threads for torch's intra-op parallelism, at most " + str(MAX_THREADS) + "; "
                           "recorded because results can depend on it (not the machine's core count)",
                           integer(1, MAX_THREADS), effect="machine")
    cpu_kernels: str = setting("native", "native: each CPU library picks its fastest code path for this CPU "
                               "(AVX-512 where there is one); portable: every one pinned to AVX2, so that x86-64 "
                               "CPUs with AVX2 compute the same bits (slower where AVX-512 would help)",
                               choices=CPU_KERNEL_MODES, effect="machine")
    device: str = setting("auto", "auto, cpu, cuda, cuda:N or mps", parse_device, effect="machine")
    deterministic: str = setting({{ cookiecutter.determinism|tojson }}, "strict: error on a non-deterministic op; "
                                 "warn: warn; off: PyTorch's fastest defaults", choices=DETERMINISM_MODES,
                                 effect="machine")
    precision: str = setting("fp32", "fp32; or mixed precision under torch.autocast: bf16, or fp16 with a "
                             "GradScaler", choices=PRECISIONS)
    compile: bool = setting(False, "wrap the model in torch.compile, set up to repeat bit for bit (needs a C++ "
                            "compiler on the CPU; the first steps compile, which takes a while)", effect="machine")
    parallel: str = setting("ddp", "how the processes that torchrun starts share the model: ddp (each holds all of "
                            "it, gradients are averaged) or fsdp (each holds a shard of the weights, gradients and "
                            "optimizer state: FSDP2); their reductions may differ in the last bits, so it is kept "
                            "on --resume", choices=PARALLEL, effect="machine")
    invariant_shards: int = setting(0, "the same bits on any number of processes (world-size invariant, DDP): cut "
                                    "each batch into N shards, each a forward and backward pass of its own whichever "
                                    "process holds it, the gradients added in shard order; 1, 2, 4 ... processes (any "
                                    "divisor of N) then give the same weights, a run resumes or verifies on another "
                                    "number (docs/distributed.md; 0: off, plain DDP)", integer(0))
    world_size: int = setting(1, "processes under torchrun (set by torchrun)", effect="fixed")
    # How the run executes: --resume may change these.
    num_workers: int = setting(0, "DataLoader worker processes", integer(0), effect="execution")
    persistent_workers: bool = setting(False, "keep workers alive between epochs", effect="execution")
    prefetch_factor: int | None = setting(None, "batches each worker loads ahead", integer(1), effect="execution")
    tensorboard: bool = setting(False, "also write the metrics as TensorBoard event files into the run folder's "
                                "tensorboard/ (needs the tensorboard package)", effect="execution")
    checkpoint_every: int = setting(50, "save a checkpoint every N optimizer steps, and at each epoch's end "
                                    "(0: epoch ends only)", integer(0), effect="execution")
    keep_best: str = setting("off", "keep the model of the best evaluation so far as best.pt (and best.json): "
                             "min:NAME or max:NAME, NAME a figure of the task, as min:loss or max:accuracy; the best "
                             "is the one that beats every earlier evaluation in metrics.csv", best_figure,
                             effect="execution")
    log_every: int = setting(50, "read the steps' metrics back from the device every N steps (and at each "
                             "checkpoint): every step still gets its row in metrics.csv", integer(1),
                             effect="execution")
    log_level: str = setting("info", "what the run prints: debug (also each checkpoint), info (each epoch and "
                             "evaluation, the result), warning (only warnings and notes) or error (only errors, "
                             "which are printed whatever this says)", choices=LOG_LEVELS, effect="execution")

    def problem(self) -> str | None:
        """A contradiction between settings, as one sentence, or None."""
        if self.num_workers == 0 and (self.persistent_workers or self.prefetch_factor is not None):
            return "--persistent-workers and --prefetch-factor need --num-workers above 0"
        problem = self.schedule_problem()
        if problem:
            return problem
        if self.beta2 != Config.beta2 and self.optimizer != "adamw":
            return "--beta2 is AdamW's: add --optimizer adamw (SGD's one coefficient is --momentum)"
        if self.parallel == "fsdp" and self.precision == "fp16":
            return ("--precision fp16 needs a loss scale that all shards agree on, which this FSDP set-up does not "
                    "have: use --precision bf16 (no loss scale needed) with --parallel fsdp")
        if self.parallel == "fsdp" and self.compile:
            return "--compile is not set up for --parallel fsdp here: leave out --compile, or use --parallel ddp"
        if self.early_stop and self.keep_best == "off":
            return ("--early-stop needs the figure it watches: add --keep-best min:NAME or max:NAME (min:loss, say); "
                    "the run stops when that figure has not improved for --early-stop evaluations")
        problem = self.invariance_problem()
        if problem:
            return problem
        per_step = self.world_size * self.accumulate
        if self.batch_size % per_step:
            return (f"--batch-size {self.batch_size} is not a multiple of {self.world_size} process(es) x "
                    f"{self.accumulate} micro-batch(es) per step, so they cannot share it equally")
        return None

    def invariance_problem(self) -> str | None:
        """What --invariant-shards cannot do with these settings, as one sentence, or None."""
        shards = self.invariant_shards
        if not shards:
            return None
        if self.parallel == "fsdp":
            return ("--invariant-shards is for --parallel ddp: FSDP's reduce-scatter adds the gradients in an order of "
                    "its own, which depends on the number of processes")
        if self.precision == "fp16":
            return ("--invariant-shards does not take --precision fp16 (its loss scale would be each process's own): "
                    "use bf16 or fp32")
        if shards % self.world_size:
            return (f"--invariant-shards {shards} is not a multiple of {self.world_size} processes: each process must "
                    f"hold as many shards (run on a divisor of {shards}, or change --invariant-shards)")
        if self.batch_size % (shards * self.accumulate):
            return (f"--batch-size {self.batch_size} is not a multiple of --invariant-shards {shards} x --accumulate "
                    f"{self.accumulate}: every shard of a micro-batch must hold as many samples")
        return None

    def schedule_problem(self) -> str | None:
        """A contradiction in the run's length or its learning rate's schedule, as one sentence, or None."""
        if self.max_steps and self.epochs != Config.epochs:
            return (f"--max-steps {self.max_steps} and --epochs {self.epochs} both set the run's length: give one "
                    "(--max-steps replaces --epochs)")
        if self.warmup_steps and self.schedule == "one-cycle":
            return "--warmup-steps is for the cosine and constant schedules (one-cycle warms up by itself)"
        if (self.min_lr or self.decay_steps) and self.schedule != "cosine":
            return "--min-lr and --decay-steps are for the cosine schedule: add --schedule cosine"
        if self.min_lr > self.lr:
            return f"--min-lr {self.min_lr} is above --lr {self.lr}: the cosine decays from --lr down to --min-lr"
        if self.decay_steps and self.decay_steps <= self.warmup_steps:
            return (f"--decay-steps {self.decay_steps} is not after --warmup-steps {self.warmup_steps}: the cosine "
                    "decays from the end of the warm-up to step --decay-steps")
        return None

    @property
    def micro_batch_size(self) -> int:
        """What one process takes at a time: the global batch shared by processes and micro-batches."""
        return self.batch_size // (self.world_size * self.accumulate)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> tuple[Config, list[str]]:
        """The config a run recorded, and the settings it did not record, which take their defaults
        (a run made before they existed). ValueError (one line) for a setting this code lacks, or a
        value its flag would refuse: a hand-edited config.json is refused before anything runs."""
        known = {f.name: f for f in fields(cls)}
        data = {name: value for name, value in data.items() if name not in RETIRED}
        unknown = sorted(data.keys() - known.keys())
        if unknown:
            raise ValueError(f"it has settings that this code does not know: {', '.join(unknown)}")
        for name, value in data.items():
            problem = recorded_value_problem(known[name], value)
            if problem:
                raise ValueError(f"its {name} is {value!r}, which is {problem}")
        added = [name for name in known if name not in data]
        # A whole number written for a float setting (`lr = 1` in TOML) is recorded as the flag
        # records it, 1.0: config.json's text then depends on the value, not on how it was written.
        data = {name: float(value) if type(known[name].default) is float and type(value) is int else value
                for name, value in data.items()}
        return cls(**data), added


def recorded_value_problem(setting_field, value: Any) -> str | None:
    """Why a setting's value read from a config.json is not one it can take, or None: the value
    must have the type of the setting and pass what its flag checks (range, choices)."""
    default, meta = setting_field.default, setting_field.metadata
    if value is None and default is None:  # prefetch_factor: an integer or None
        return None
    kind = int if default is None else type(default)
    fits = (type(value) in (int, float)) if kind is float else type(value) is kind  # True is no integer here
    if not fits:
        return {bool: "not true or false", int: "not an integer", float: "not a number"}.get(kind, "not a string")
    if meta["choices"] and value not in meta["choices"]:
        return f"not one of {', '.join(meta['choices'])}"
    if meta["parse"] is not None:
        try:
            meta["parse"](str(value))
        except argparse.ArgumentTypeError as error:
            return f"refused by {flag(setting_field.name)}: {error}"
    return None


def settings_from_file(path: Path) -> dict:
    """`--config FILE`: the settings a .toml or .json file gives, checked as a recorded config.json
    is (each name known, each value one its flag takes). A run's own config.json is such a file: its
    world_size is left out (torchrun's to set), and a retired setting too. ValueError in one line."""
    settings = {name: value for name, value in read_settings_file(path).items()
                if name != "world_size" and name not in RETIRED}
    config, _ = Config.from_dict(settings)  # refuses a name this code lacks or a value its flag would refuse
    return {name: getattr(config, name) for name in settings}  # as the flags give them: `lr = 1` is 1.0


def effect_of(name: str) -> str:
    return Config.__dataclass_fields__[name].metadata["effect"]


EXECUTION_ONLY = tuple(f.name for f in fields(Config) if f.metadata["effect"] == "execution")
FLAGS = tuple(f for f in fields(Config) if f.metadata["effect"] != "fixed")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser("train", "Train the model reproducibly; every run writes a folder that records what it did.")
    # Settings: a flag not typed is absent from the result (SUPPRESS), so that --resume can tell
    # what the user typed from what the defaults say.
    for setting_field in FLAGS:
        meta, default = setting_field.metadata, setting_field.default
        options = {"default": argparse.SUPPRESS, "help": f"{meta['help']} (default: {default})"}
        if isinstance(default, bool):
            parser.add_argument(flag(setting_field.name), action="store_true", **options)
        else:  # argparse shows the argument as its choices, or as the setting's name: --lr LR
            parser.add_argument(flag(setting_field.name), type=meta["parse"], choices=meta["choices"], **options)
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="take the settings from a .toml or .json file (a run's config.json among them), "
                             "names as in config.json; a flag typed beside it overrides its value; the run "
                             "records the result in its own config.json (default: none)")
    # How to run, not what to compute: never part of the config.
    parser.add_argument("--out", type=run_folder, help="run folder (default: runs/seed<SEED>)")
    parser.add_argument("--overwrite", action="store_true", help="replace the run already in --out (default: off)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its newest intact checkpoint (default: off)")
    parser.add_argument("--stop-after-steps", type=integer(1), metavar="N",
                        help="stop after N optimizer steps, with a checkpoint, as if interrupted (verify and "
                             "doctor use it to check the first steps of a long run) (default: none)")
    return parser


def parse_command_line(argv: list[str] | None, parser: argparse.ArgumentParser | None = None
                       ) -> tuple[dict, argparse.Namespace]:
    """(the settings the user gave, typed or in --config's file, every flag's value): SystemExit(2)
    with one line on a mistake. A flag typed overrides the file's value for its setting. `parser`:
    build_parser()'s, with another command's one-line errors (study's)."""
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    typed = {f.name: getattr(args, f.name) for f in FLAGS if hasattr(args, f.name)}
    if args.config is not None:
        try:
            typed = {**settings_from_file(args.config), **typed}
        except ValueError as error:
            parser.error(f"--config {args.config}: {error}")
    return typed, args


def resume_config(recorded: Config, typed: dict, world_size: int) -> tuple[Config, list[str]]:
    """The config to resume with, and the typed settings that contradict the recorded run.
    Execution-only settings may change; untyped ones keep their recorded values. The world size
    may change too (a cluster hands back whatever is free): the config then holds this process's
    world size, and the run folder records the change (engine/world_sizes.py)."""
    # --early-stop ends the run by the figure --keep-best watches: then that decides the weights too.
    free = [name for name in EXECUTION_ONLY if not (recorded.early_stop and name == "keep_best")]
    changes = {name: value for name, value in typed.items() if name in free}
    differing = [f"{name} (recorded {getattr(recorded, name)!r}, given {value!r})"
                 for name, value in typed.items() if name not in free and getattr(recorded, name) != value]
    return Config(**{**recorded.to_dict(), **changes, "world_size": world_size}), differing


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
