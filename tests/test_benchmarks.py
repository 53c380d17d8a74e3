"""The benchmark scripts run against the template as it is: a refactor of the generated package that
breaks benchmarks/run.py or benchmarks/gpu.py fails here, not on the day someone measures.

Their --smoke modes run every part on a few steps and samples (seconds); the figures mean nothing.
"""

from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, docs_page
from test_readme_zh import FIGURE, INLINE_CODE

# The issue-22 targets, and what the READMEs quote besides.
RUN_RATIOS = ("loop_vs_plain", "strict_vs_off", "loader_vs_plain_0_workers", "loader_vs_plain_2_workers",
              "slow_loader_vs_plain_0_workers", "slow_loader_vs_plain_2_workers", "torch_only_loop_vs_plain",
              "torch_only_loader_vs_plain_0_workers", "torch_only_loader_vs_plain_2_workers", "bf16_vs_fp32")
PROFILE_PARTS = ("getitem", "plus_key", "plus_random", "plus_numpy", "plus_torch", "plus_all_three")
MACHINE = ("date", "platform", "cpus", "python", "torch", "mode", "command", "load_average_before",
           "load_average_after", "wall_seconds")


def smoke(script: str, *args: str, tmp_path) -> dict:
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, f"benchmarks/{script}", "--smoke", *args, "--json", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


def positive(value: object) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


@pytest.mark.slow  # runs a benchmark script, which trains: the full suite's
def test_run_py_measures_every_target_and_says_where_and_when(tmp_path):
    results = smoke("run.py", tmp_path=tmp_path)
    assert all(positive(results[name]) for name in RUN_RATIOS), {name: results.get(name) for name in RUN_RATIOS}
    profile = results["keyed_randomness_us_per_sample"]
    assert set(profile) == set(PROFILE_PARTS) and positive(profile["getitem"])
    assert positive(results["checkpoint_ms"]) and positive(results["bake_seconds"])
    machine = results["machine"]
    assert set(MACHINE) <= set(machine) and machine["mode"] == "smoke"
    assert machine["command"] == f"python benchmarks/run.py --smoke --json {tmp_path / 'results.json'}"
    assert len(machine["load_average_before"]) == len(machine["load_average_after"]) == 3


@pytest.mark.slow  # runs a benchmark script, which trains: the full suite's
def test_gpu_py_runs_every_part_but_compile_on_the_cpu(tmp_path):
    results = smoke("gpu.py", "--device", "cpu", tmp_path=tmp_path)
    assert results["device"] == "cpu"
    for name in ("loop_vs_plain", "strict_vs_off", "loader_vs_plain_0_workers", "log_every_50_vs_1",
                 "conv_strict_vs_off", "conv_cudnn_disabled_vs_off"):
        assert positive(results[name]), name
    assert set(results["read_back_share"]) == {"log_every_1", "log_every_50"}
    assert all(0 <= share < 1 for share in results["read_back_share"].values())
    assert results["conv_bitwise_equal_twice"]["strict"] is True
    assert results["machine"]["command"].startswith("python benchmarks/gpu.py --smoke --device cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="about a machine without a CUDA GPU")
def test_gpu_py_without_a_gpu_says_so_in_one_line_and_exits_2():
    result = subprocess.run([sys.executable, "benchmarks/gpu.py"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0] and "--device cpu --smoke" in lines[0], lines


def test_the_readme_quotes_the_committed_results():
    """Every ratio in the README's benchmark tables, the per-sample profile and the run's date are
    those of benchmarks/results.json (the portable rows: results-portable.json; the tasks' rows:
    results-tasks.json): a new run cannot be committed with the old figures left in the README,
    nor a figure be written there that no run measured."""
    results = json.loads((ROOT / "benchmarks" / "results.json").read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## What reproducibility costs (benchmarks)")[1].split("\n## ")[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section, flags=re.MULTILINE))
    ratios = {name: value.strip() for name, value in rows.items() if re.fullmatch(r"\d+\.\d\d", value.strip())}
    assert "loop_vs_plain" in ratios and "loader_vs_plain_0_workers" in ratios
    portable = json.loads((ROOT / "benchmarks" / "results-portable.json").read_text(encoding="utf-8"))
    measured = {name: f"{results[name]:.2f}" for name in ratios if name in results}
    measured |= {name: f"{portable[name]['ratio']:.2f}" for name in ratios if name in portable}
    tasks = json.loads((ROOT / "benchmarks" / "results-tasks.json").read_text(encoding="utf-8"))
    measured |= {name: f"{tasks[name]:.2f}" for name in ratios if name in tasks}
    assert ratios == measured
    profile = results["keyed_randomness_us_per_sample"]
    parts = " + ".join(f"{profile[name]:.1f}" for name in ("plus_key", "plus_random", "plus_numpy", "plus_torch"))
    assert rows["keyed_randomness_us_per_sample"].startswith(f"{profile['getitem']:.1f} µs + {parts}; "
                                                             f"all three {profile['plus_all_three']:.1f}")
    assert f"run on {results['machine']['date'][:10]}" in " ".join(section.split())


def test_the_readme_names_the_cpu_and_the_date_of_the_portable_record():
    """The portable table's bits are one CPU's: the README names the vendor and model, the NumPy
    and the date that results-portable.json records, so a run on another machine cannot be
    committed under this one's name."""
    machine = json.loads((ROOT / "benchmarks" / "results-portable.json").read_text(encoding="utf-8"))["machine"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = " ".join(readme.split("python benchmarks/portable.py --json")[1].split("\n\n")[0].split())
    for fact in (f"run on {machine['date']}", machine["cpu_vendor"], machine["cpu"], f"NumPy {machine['numpy']}"):
        assert fact in paragraph, fact


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_generated_readmes_quote_the_committed_results_for_the_cost_of_keyed_randomness(language):
    """The knob table of each generated reproducibility guide (docs/reproducibility.md) says what
    seeding before every sample and every micro-batch costs, and what strict costs; those figures are
    results.json's, so a new run cannot leave old ones there."""
    results = json.loads((ROOT / "benchmarks" / "results.json").read_text(encoding="utf-8"))
    profile, date = results["keyed_randomness_us_per_sample"], results["machine"]["date"][:10]
    slow = sorted(round(100 * (1 - results[f"slow_loader_vs_plain_{n}_workers"])) for n in (0, 2))
    readme = docs_page("reproducibility", language).read_text(encoding="utf-8")
    lines = [line for line in readme.splitlines() if line.startswith("|")]
    loop_row, loader_row = [line for line in lines if " µs" in line and (
        "`utils/data.py: KeyedRandomness`" in line or "keyed_randomness" in line)]
    [strict_row] = [line for line in lines if line.startswith("| `torch.use_deterministic_algorithms(True)` |")]

    def figures(row: str) -> set[str]:
        return set(FIGURE.findall(INLINE_CODE.sub(" ", row)))

    assert figures(loader_row) == {
        f"{profile['plus_all_three']:.0f}", f"{profile['plus_random']:.1f}", f"{profile['plus_torch']:.1f}",
        f"{results['loader_vs_plain_0_workers']:.2f}", f"{results['loop_vs_plain']:.2f}", date,
        str(results["machine"]["cpus"]), "200", *map(str, slow)}
    assert re.search(rf"\b{profile['plus_all_three']:.0f} µs", loop_row)
    assert figures(strict_row) == {f"{results['strict_vs_off']:.2f}", date}


def test_the_committed_fingerprint_names_the_operations_the_current_code_uses():
    """benchmarks/fingerprint.json (this machine's, beside the portable table) is compared by users'
    `doctor --fingerprint --against`: it must hold what the current engine/fingerprint.py computes."""
    package = ROOT / "{{cookiecutter.project_slug}}" / "src" / "{{cookiecutter.project_slug}}"
    source = package / "engine" / "fingerprint.py"
    names = {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(source.read_text()).body
             if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
             and node.targets[0].id in ("OPERATIONS", "MODES", "FORMAT")}
    record = json.loads((ROOT / "benchmarks" / "fingerprint.json").read_text(encoding="utf-8"))
    assert record["format"] == names["FORMAT"] and tuple(record["modes"]) == names["MODES"]
    for mode, found in record["modes"].items():
        assert found is not None, f"the record has no {mode} fingerprint"
        assert tuple(found["operations"]) == names["OPERATIONS"], "re-run: python benchmarks/fingerprint.py"


def invariant_benchmark():
    """benchmarks/invariant.py as a module (it imports benchmarks/memory.py beside it)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import invariant
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return invariant


@pytest.mark.slow  # runs a benchmark script, which trains: the full suite's
def test_invariant_py_gives_one_hash_for_the_mode_on_1_2_and_4_processes_and_three_for_plain_ddp(tmp_path):
    results = smoke("invariant.py", tmp_path=tmp_path)
    assert len(set(results["hashes"]["invariant"].values())) == 1, results["hashes"]
    assert len(set(results["hashes"]["ddp"].values())) == 3, results["hashes"]  # the negative control
    assert all(positive(results["median"][mode]["ms_per_step"]) for mode in ("ddp", "invariant"))
    assert results["machine"]["command"] == f"python benchmarks/invariant.py --smoke --json {tmp_path / 'results.json'}"


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_distributed_docs_quote_the_committed_record_of_the_invariant_mode(language):
    record = json.loads((ROOT / "benchmarks" / "results-invariant.json").read_text(encoding="utf-8"))
    assert record["settings"]["max_samples"] == 0 and record["settings"]["rounds"] >= 3  # a full run, not a smoke
    assert len(set(record["hashes"]["invariant"].values())) == 1 and len(set(record["hashes"]["ddp"].values())) == 3
    page = docs_page("distributed", language).read_text(encoding="utf-8")
    missing = [f"{name}: {text}" for name, text in invariant_benchmark().quoted(record).items() if text not in page]
    assert not missing, f"docs/distributed.md ({language}) does not quote benchmarks/results-invariant.json: {missing}"
