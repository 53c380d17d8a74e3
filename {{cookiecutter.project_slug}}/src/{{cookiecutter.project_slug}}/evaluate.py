"""Evaluates a run's weights on a split of its data, without training.

    python -m {{ cookiecutter.project_slug }}.evaluate runs/a                    # model.pt on the validation split
    python -m {{ cookiecutter.project_slug }}.evaluate runs/a --split train      # on the training split
    python -m {{ cookiecutter.project_slug }}.evaluate runs/a --weights runs/a/checkpoints/step-00000050.pt
    python -m {{ cookiecutter.project_slug }}.evaluate runs/a --json figures.json   # the figures in another file

The data and the model are built as the run built them: from RUN_DIR/config.json and task.py, in
a process started with the run's hash seed (and its CPU kernel pins under --cpu-kernels portable),
then evaluated by train.py's own evaluate(): in eval mode, the task's sums added over the whole
split before the task divides. So model.pt on the validation split gives exactly the figures of
summary.json, and an epoch's last checkpoint those of the epoch's row in metrics.csv, bit for bit
(a run made on several processes added its sums over ranks: the last bits may differ). `--split
test` evaluates on the split that task.py's optional `make_test_set(config)` returns. A mistake (a
folder that is not a run, a model.pt that changed since the run, weights that do not fit the
model): one line, exit 2.

The figures, exactly, with what was evaluated, go into RUN_DIR/evaluations/SPLIT-WEIGHTS-HASH.json
(evaluations/val-model-b2cf92ad6f35.json, HASH the weights' sha256 cut to 12), or to --json FILE:
the run's own record (config.json, metrics.csv, summary.json) is never touched. With the run's
--eval-batches, --split val scores the samples its evaluations scored.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from . import DEFAULT_SEED
from .engine.cli import make_parser, run_command
from .engine.files import file_place_problem, write_json
from .engine.run_folder import EVALUATIONS
from .engine.runs import Run, RunError, read_run
from .engine.startup import relaunch_with_run_environment, started_as_module

SPLITS = ("val", "train", "test")


def main(argv: list[str] | None = None) -> int:
    parser = make_parser("evaluate", "Evaluate a run's weights on a split of its data, without training.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument("--split", choices=SPLITS, default="val",
                        help="the split to evaluate: val, train, or test (task.py's make_test_set) (default: val)")
    parser.add_argument("--weights", type=Path, metavar="FILE",
                        help="a checkpoint of the run (checkpoints/step-N.pt) or a model.pt "
                             "(default: RUN_DIR/model.pt)")
    parser.add_argument("--device", default=None,
                        help="evaluate on this device: auto, cpu, cuda, cuda:N or mps (default: the run's)")
    parser.add_argument("--json", type=Path, metavar="FILE", default=None,
                        help="write the figures, exactly, with what was evaluated, to FILE (default: "
                             f"RUN_DIR/{EVALUATIONS}/SPLIT-WEIGHTS-HASH.json, HASH the weights' sha256 cut to 12)")
    args = parser.parse_args(argv)
    if args.json is not None and file_place_problem(args.json, "--json"):  # said before anything runs
        parser.error(file_place_problem(args.json, "--json"))
    try:
        run = read_run(args.run_dir)
    except RunError as error:
        parser.error(str(error))
    weights = args.weights or args.run_dir / "model.pt"
    if args.weights is None and not weights.exists():
        why = "the run finished, but the file is gone" if run.summary else "the run has not finished"
        parser.error(f"{weights} does not exist ({why}); pass --weights "
                     f"{args.run_dir / 'checkpoints' / 'step-N.pt'}, one of its checkpoints")
    if not weights.is_file():
        parser.error(f"--weights {weights}: " + ("a folder (a sharded checkpoint of --parallel fsdp?): evaluate the "
                                                 "run's model.pt, which holds the whole model"
                                                 if weights.is_dir() else "no such file"))
    # The run's hash seed and kernel pins, read from its config.json, before torch loads (as train does).
    if started_as_module(f"{__package__}.evaluate"):
        relaunch_with_run_environment(["--config", str(args.run_dir / "config.json")], DEFAULT_SEED, parser.prog)
    try:
        result = evaluate_run(run, weights, args.split, args.device)
    except ValueError as error:
        parser.error(str(error))
    figures = "  ".join(f"{args.split}_{name} {value:.4f}" for name, value in result["figures"].items())
    print(f"{figures}  ({result['samples']} samples; {weights}, weights_sha256 {result['weights_sha256'][:12]})")
    if result["note"]:
        print(f"note: {result['note']}", file=sys.stderr)
    # One file per split and weights: named by the file and the weights' hash, so that no evaluation
    # of other weights (another run's model.pt) replaces it.
    name = f"{args.split}-{weights.stem}-{result['weights_sha256'][:12]}.json"
    destination = args.json or args.run_dir / EVALUATIONS / name
    try:
        write_json(destination, result)
    except OSError as error:
        parser.error(f"{destination}: cannot be written ({error.strerror or error})" +
                     ("" if args.json else "; write the figures elsewhere with --json FILE"))
    print(f"-> {destination}")
    return 0


def evaluate_run(run: Run, weights_path: Path, split: str, device_name: str | None) -> dict:
    """The task's figures for the weights in `weights_path` on `split` of `run`'s data, with what
    was evaluated. ValueError, in one line, for what cannot be evaluated."""
    from . import task  # imported here: torch, after the relaunch, and never for a bad RUN_DIR
    from .config import Config
    from .engine.checkpoint import read_model_weights
    from .engine.plan import fit_problem
    from .train import evaluate, evaluation_samples, first, make_loaders
    from .utils.device import select_device
    from .utils.repro import configure_determinism, seed_everything, set_thread_count, state_dict_sha256

    try:
        config = Config.from_dict(run.config)[0]
    except (TypeError, ValueError) as error:
        raise ValueError(f"{run.path / 'config.json'}: {error}") from None
    if split == "test" and not hasattr(task, "make_test_set"):
        raise ValueError("--split test: task.py has no make_test_set(config), the function that returns the test split")
    state, step = read_model_weights(weights_path)
    digest = state_dict_sha256(state)
    saved_by_run = weights_path.resolve() == (run.path / "model.pt").resolve()
    if saved_by_run and run.weights not in (None, digest):
        raise ValueError(f"{weights_path} is not the model the run saved: its weights_sha256 is {digest}, "
                         f"summary.json records {run.weights}")
    if saved_by_run and run.summary is not None:
        step = run.summary["steps"]
    try:
        device = select_device(device_name or config.device)
    except ValueError as error:
        raise ValueError(f"{error} (--device chooses another)") from None
    # As train does: the run's determinism and threads, then the seed before the data and the model.
    configure_determinism(config.deterministic)
    set_thread_count(config.threads)
    seed_everything(config.seed)
    train_set, val_set = task.make_datasets(config)
    model = task.make_model(config, train_set).to(device)
    problem = fit_problem(model, state, str(weights_path))
    if problem:
        raise ValueError(problem)
    dataset = val_set if split == "val" else train_set if split == "train" else task.make_test_set(config)
    # One process, the run's batches: the loader of its validation split (in order, no drop), over `dataset`.
    dataset = first(dataset, config.max_samples)  # the run's --max-samples, as it trained and evaluated
    # The validation split as the run's evaluations scored it: with --eval-batches, their samples.
    dataset = evaluation_samples(dataset, config) if split == "val" else dataset
    loader = make_loaders(dataset, dataset, replace(config, world_size=1))[1]
    figures = evaluate(model, loader, device, config.precision)
    note = (f"the run was made on {config.world_size} processes, which added their sums in another order: "
            "the last bits may differ from its own figures" if config.world_size > 1 and not config.invariant_shards
            else None)  # --invariant-shards: the sums are added in shard order on any number of processes
    return {"run": str(run.path), "weights": str(weights_path), "weights_sha256": digest, "step": step,
            "split": split, "samples": len(loader.dataset), "device": str(device),
            "python_hash_seed": os.environ.get("PYTHONHASHSEED"), "figures": figures, "note": note}


if __name__ == "__main__":
    sys.exit(run_command("evaluate", main))
