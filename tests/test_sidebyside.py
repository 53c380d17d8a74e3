"""benchmarks/sidebyside.py (issue 45): the price of the guarantee, side by side with a plain PyTorch
loop and Lightning. Its --smoke mode runs every part once, tiny (its figures mean nothing); the
committed record has the same shape and shows the guarantee (one weights hash for 0 and 2 workers,
ours only); README.md quotes the committed record's figures, no other.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys

import pytest
from conftest import ROOT
from test_readme_zh import FIGURE, INLINE_CODE

RECORD = ROOT / "benchmarks" / "results-sidebyside.json"
CONTENDERS = ("plain", "lightning", "research", "teaching")
FIGURES = ("train_cpu_s", "train_cpu_main_s", "train_wall_s", "startup_s", "relaunch_s", "torch_imported_s",
           "process_cpu_s", "process_wall_s", "peak_mb")
PAIRS = ("plain/research", "lightning/research", "plain/teaching", "lightning/teaching")
RATIOS = ("train_cpu_s", "train_wall_s", "startup_s", "process_cpu_s", "peak_mb")
ALL_CONDITIONS = {"example_0_workers", "example_2_workers", "realistic_0_workers", "realistic_2_workers"}
MACHINE = ("date", "platform", "cpus", "cpu", "python", "torch", "lightning", "numpy", "mode", "command",
           "load_average_before", "load_average_after", "wall_seconds")
COSTS = {"seeding_us_per_sample": ("plus_all_three_min", "plus_all_three_median", "seed_alone_median"),
         "strict_per_step": ("off_ms", "strict_ms", "added_ms", "added_percent", "no_fill_added_ms"),
         "environment_record": ("seconds", "packages", "installed_packages_warm_seconds", "git_commit_warm_seconds")}
ANCHOR = "`python benchmarks/sidebyside.py` puts the price of the guarantee side by side"


def script():
    """benchmarks/sidebyside.py as a module (it imports the standard library only)."""
    spec = importlib.util.spec_from_file_location("sidebyside", ROOT / "benchmarks" / "sidebyside.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_shape(record: dict, conditions: set[str]) -> None:
    """What every record holds: the machine, per condition each contender's medians, hashes and the
    ratios peer/ours, the costs the READMEs state, and every run."""
    machine = record["machine"]
    assert set(MACHINE) <= set(machine)
    assert len(machine["load_average_before"]) == len(machine["load_average_after"]) == 3
    assert set(record["conditions"]) == conditions
    for name, entry in record["conditions"].items():
        for contender in CONTENDERS:
            figures = entry[contender]
            assert all(finite(figures[key]) and figures[key] >= 0 for key in FIGURES), (name, contender, figures)
            assert all(figures[key] > 0 for key in ("train_cpu_s", "train_wall_s", "startup_s", "process_cpu_s",
                                                     "peak_mb")), (name, contender, figures)
            hashes = figures["weights_sha256"]
            assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), hashes
        for contender in ("plain", "lightning"):  # one interpreter: no relaunch
            assert entry[contender]["relaunch_s"] == 0
        assert set(entry["ratios"]) == set(PAIRS)
        assert all(finite(ratio[key]) and ratio[key] > 0 for ratio in entry["ratios"].values() for key in RATIOS)
    datasets = {name.split("_")[0] for name in conditions}
    assert set(record["one_hash_for_0_and_2_workers"]) == datasets
    assert all(set(found) == set(CONTENDERS) for found in record["one_hash_for_0_and_2_workers"].values())
    costs = record["costs"]
    for part, keys in COSTS.items():
        assert all(finite(costs[part][key]) for key in keys), (part, costs[part])
    assert costs["environment_record"]["seconds"] > 0 and costs["environment_record"]["packages"] > 0
    assert all(costs["checkpoint"][size]["ms"] > 0 and costs["checkpoint"][size]["unsynced_ms"] > 0
               for size in ("research", "teaching"))
    assert set(costs["relaunch_s"]) == {"research", "teaching"} and all(map(finite, costs["relaunch_s"].values()))
    assert finite(costs["augmentation_us_per_sample"])
    settings = record["settings"]
    assert settings["steps"] % settings["epochs"] == 0 and settings["threads"] == 1
    assert len(record["runs"]) == settings["rounds"] * len(conditions) * len(CONTENDERS)


@pytest.mark.slow
def test_the_smoke_run_measures_every_part_and_writes_the_record(tmp_path):
    """Every contender, both datasets, both worker counts and every micro-benchmark, once (about a
    minute and a half on two shared cores: most of it the contenders' imports of torch and Lightning)."""
    out = tmp_path / "sidebyside.json"
    result = subprocess.run([sys.executable, "benchmarks/sidebyside.py", "--smoke", "--json", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    record = json.loads(out.read_text(encoding="utf-8"))
    check_shape(record, {"example_0_workers", "realistic_2_workers"})
    assert record["machine"]["mode"] == "smoke"
    assert record["machine"]["command"] == f"python benchmarks/sidebyside.py --smoke --json {out}"
    # One worker count per dataset in a smoke run: whether the hash changes with it is not measured.
    assert all(value is None for found in record["one_hash_for_0_and_2_workers"].values() for value in found.values())
    # The research size relaunches (its images), plain and Lightning do not; every run trained.
    assert {run["images"] for run in record["runs"] if run["contender"] == "research"} == {2}
    assert {run["images"] for run in record["runs"] if run["contender"] in ("plain", "lightning")} == {1}
    assert ANCHOR in script().readme_block(record)


def test_the_committed_record_is_a_whole_run_and_shows_the_guarantee():
    """The committed record is a full (or quick) run of every condition; ours gives one weights
    hash for 0 and 2 workers on both datasets, and the plain loop and Lightning do not (the
    negative control: their workers draw from generators of their own)."""
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    check_shape(record, ALL_CONDITIONS)
    assert record["machine"]["mode"] in ("full", "quick")
    assert record["machine"]["command"].startswith("python benchmarks/sidebyside.py")
    for dataset, found in record["one_hash_for_0_and_2_workers"].items():
        assert found == {"plain": False, "lightning": False, "research": True, "teaching": True}, (dataset, found)


def readme_block(section: str, paragraphs: int) -> str:
    """The `paragraphs` paragraphs of `section` from the one that holds ANCHOR (however its lines are wrapped)."""
    found = section.split("\n\n")
    start = next(index for index, paragraph in enumerate(found) if ANCHOR in " ".join(paragraph.split()))
    return "\n\n".join(found[start:start + paragraphs])


def figures(text: str) -> list[str]:
    return sorted(FIGURE.findall(INLINE_CODE.sub(" ", text)))


def test_the_readme_quotes_the_committed_record():
    """README.md's paragraphs on the side-by-side benchmark (`python benchmarks/sidebyside.py
    --readme` prints them from the record) hold exactly the committed record's figures: a new run
    cannot be committed with the old figures left in the README, nor a figure be written there that
    no run measured. The prose may be edited; the numbers must stay the record's."""
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    expected = script().readme_block(record)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## What reproducibility costs (benchmarks)")[1].split("\n## ")[0]
    assert ANCHOR in " ".join(section.split()), \
        "paste the output of `python benchmarks/sidebyside.py --readme` into README.md's section on the benchmarks"
    found = readme_block(section, expected.count("\n\n") + 1)
    assert figures(found) == figures(expected)
