"""How a run ends early, in one line and an exit status: stopped (a signal, --stop-after-steps) or
failed (an error in the task's code, with its traceback kept in the run folder's error.log).

train.py calls these where the run ends; they say where it ended and how to continue.
"""

from __future__ import annotations

import errno
import re
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from ..config import Config
from . import distributed
from .cli import logger, prog
from .loop import NonFiniteStep
from .plan import Plan
from .precision import compile_failure
from .run_folder import clear_run_files, write_error_log
from .signals import signal_name


def stopped(plan: Plan, signum: int | None, step: int, checkpoint: Path | None) -> int:
    """Says where the run stopped and how to continue; the exit status (128 + signal number)."""
    again = resume_command(plan)
    if signum is None and step == plan.stop_after_steps:
        logger.info(f"stopped after step {step} as asked, checkpoint {checkpoint}; continue with: {again}")
        return 0
    signum = signum or signal.SIGTERM  # a rank told by another rank
    logger.warning(f"{signal_name(signum)}: stopped after step {step}, checkpoint {checkpoint}; "
                   f"continue with: {again}")
    return 128 + signum


def checkpoint_after_failure(checkpoint: Callable[[], Path | None], new_steps: bool, config: Config) -> Path | None:
    """A checkpoint of the last completed step, if steps were taken since the last one and it can
    still be written (under torchrun, a rank that failed may have left the others unable to).
    Under FSDP every rank writes its shards together with the others, which a failed rank has left
    waiting in another collective: the newest checkpoint stands."""
    if not new_steps or (config.parallel == "fsdp" and config.world_size > 1):
        return None
    try:
        return checkpoint()
    except Exception:  # the failure itself may prevent it; the newest earlier checkpoint stands
        return None


def failed(plan: Plan, error: BaseException, step: int, checkpoint: Path | None) -> int:
    """One line naming what failed and where; the traceback into the run folder's error.log. A run
    that had not taken a step leaves nothing a plain rerun would refuse to replace."""
    if isinstance(error, NonFiniteStep):
        return stopped_non_finite(plan, error)
    explanation = explain_nondeterministic_error(error, plan.device.type)  # strict mode refused an op
    compile_problem = compile_failure(error)
    what = explanation or compile_problem or no_space_left(error, plan.out) or describe_error(error)
    if step == 0 and plan.resume_from is None and distributed.rank() == 0 and plan.out.is_dir():
        clear_run_files(plan.out)  # nothing of value yet
    log = write_error_log(plan.out, error) if distributed.rank() == 0 and plan.out.is_dir() else None
    where = f"stopped at step {step}" if step else "failed before its first step"
    newest = newest_checkpoint_of(plan.out)  # what is on disk, not what was meant to be
    kept = (f"checkpoint {checkpoint}; once fixed, continue with: {resume_command(plan)}" if checkpoint
            else "nothing to resume; once fixed, run the same command again" if not step and not plan.resume_from
            else f"its newest checkpoint, {newest}, stands; once fixed, continue with: {resume_command(plan)}"
            if newest else "it has no checkpoint to resume from; once fixed, start it again with --overwrite")
    print(f"{prog('train')}: error: {where}: {what}" + (f"; traceback in {log}" if log else "") + f"; {kept}",
          file=sys.stderr)
    return 2 if compile_problem else 1


def stopped_non_finite(plan: Plan, error: NonFiniteStep) -> int:
    """The one line of a run that --nonfinite stop ended: the step, its figures, its samples, what
    was kept and the ways on; exit status 1. The traceback goes to error.log, as for a failure."""
    log = write_error_log(plan.out, error) if distributed.rank() == 0 and plan.out.is_dir() else None
    figures = ", ".join(f"{name} {value!r}" for name, value in error.figures.items())
    samples, in_training = "", error.split == "train"
    if error.samples and in_training:
        shown = ", ".join(map(str, error.samples[:8])) + (", ..." if len(error.samples) > 8 else "")
        samples = f"; its samples (indices in the training set): {shown}"
    kept = newest_checkpoint_of(plan.out)
    what = "the loss or a gradient is not finite" if in_training else \
        "the validation loss is not finite: the step's update broke the model"
    ways = "a lower --lr, --clip-grad-norm, a fix of those samples or --nonfinite skip" if in_training else \
        "a lower --lr or --clip-grad-norm"
    print(f"{prog('train')}: error: stopped at step {error.step} (epoch {error.epoch + 1}): {what} ({figures})"
          f"{samples}; no checkpoint of it was written, "
          + (f"the newest, {kept}, stands" if kept else "and there is none from before it")
          + f"; {ways}, then start again with --overwrite" + (f"; traceback in {log}" if log else ""), file=sys.stderr)
    return 1


def no_space_left(error: BaseException, out: Path) -> str | None:
    """'no space left on device' and what is free, when `error` (or an error it was raised from:
    torch.save reports a full disk as a RuntimeError of its zip writer) is the disk being full."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            try:
                free = f"{shutil.disk_usage(out).free / 2**20:.0f} MiB free"
            except OSError:
                free = "free space unknown"
            return f"no space left on device ({free} where {out} is)"
        seen = seen.__cause__ or seen.__context__
    return None


def newest_checkpoint_of(out: Path) -> str | None:
    """The newest checkpoint's name in the run folder's checkpoints/, if any."""
    found = sorted(path.name for path in (out / "checkpoints").glob("step-*"))
    return found[-1] if found else None


def describe_error(error: BaseException) -> str:
    """What failed, in a few words: the sample and its error for a dataset (in a loader worker too),
    else the error and the innermost line of code it came from."""
    text = str(error).strip()
    if "SampleError" in type(error).__name__ or "SampleError: " in text:
        sample = text.rsplit("SampleError: ", 1)[-1].splitlines()[0]
        return f"the dataset failed on {sample}"
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    where = f" (in {Path(frame.tb_frame.f_code.co_filename).name}, line {frame.tb_lineno})" if frame else ""
    return f"{type(error).__name__}: {(text.splitlines() or [''])[0][:300]}{where}"


def resume_command(plan: Plan) -> str:
    if plan.config.world_size == 1 and plan.config.parallel != "fsdp":
        return f"{prog('train')} --out {plan.out} --resume"
    return "the same torchrun command plus --resume"


def explain_nondeterministic_error(error: BaseException, device_type: str = "cuda") -> str | None:
    """One line that names the op strict mode refused, and the ways out; None for other errors."""
    match = re.search(r"(\S+) does not have a deterministic implementation", str(error))
    if match is None:
        return None
    cpu = "" if device_type == "cpu" else "; or run on the CPU, where more ops have one"
    return (f"the op {match.group(1)} has no deterministic implementation on this device, so strict mode "
            "stopped. Options: --deterministic warn (run it anyway, warn, and lose the bitwise guarantee); "
            f"replace the op with one that has a deterministic kernel{cpu}")
