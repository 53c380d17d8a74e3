"""The session's summary of what each generated suite cost: the figures a change to CI's time
starts from (tests/conftest.py's run_generated_suite, SUITE_COSTS)."""

from __future__ import annotations

import json
import math

import conftest
from conftest import children_cpu, pytest_terminal_summary, run_generated_suite

# A suite of one test that starts a process which spends CPU, and records what pytest's process
# and its waited-for children spent by the end of that test: the least the suite's cost can be.
SPENDING_SUITE = '''
import json, resource, subprocess, sys

def test_spends_cpu_in_a_child():
    subprocess.run([sys.executable, "-c", "sum(range(2 * 10**7))"], check=True)
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    with open("spent.json", "w") as out:
        json.dump({"seconds": seconds, "children": children.ru_utime + children.ru_stime}, out)
'''


def test_a_suites_cpu_counts_the_processes_it_started(tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_spend.py").write_text(SPENDING_SUITE)
    monkeypatch.setattr(conftest, "SUITE_COSTS", [])
    result = run_generated_suite(tmp_path, "tests", label="spending")
    spent = json.loads((tmp_path / "spent.json").read_text())
    assert spent["children"] > 0.05  # the child's sum counted: the oracle is not empty
    assert spent["seconds"] - 0.02 <= result.cpu <= result.wall * 4 + 1  # 0.01 s ticks, each counted twice at most
    assert conftest.SUITE_COSTS == [("spending", result.wall, result.cpu)]


def test_the_cpu_is_read_from_either_shells_times_and_is_nan_without_it():
    assert children_cpu("0m0.000000s 0m0.000000s\n1m3.250000s 0m0.500000s\n") == 63.75  # dash
    assert children_cpu("...\n0m0.004s 0m0.001s\n0m3.236s 0m0.296s\n") == 3.236 + 0.296  # bash
    assert math.isnan(children_cpu("Killed\n"))


def test_the_summary_lists_the_suites_the_costliest_first_and_their_sum(monkeypatch):
    lines = []
    reporter = type("Reporter", (), {"section": lambda self, title: lines.append(f"== {title}"),
                                     "write_line": lambda self, line: lines.append(line)})()
    monkeypatch.setattr(conftest, "SUITE_COSTS", [("teaching", 60.0, 70.0), ("defaults", 200.0, 380.0)])
    pytest_terminal_summary(reporter)
    assert lines[1].split() == ["200", "s", "380", "s", "CPU", "defaults"]
    assert lines[2].split() == ["60", "s", "70", "s", "CPU", "teaching"]
    assert lines[3].split() == ["450", "s", "CPU", "in", "all"]
    lines.clear()  # a suite killed by its timeout: listed last, its CPU unknown, the sum said to lack it
    monkeypatch.setattr(conftest, "SUITE_COSTS", [("teaching", 60.0, 70.0), ("hung", 2400.0, math.nan),
                                                  ("defaults", 200.0, 380.0)])
    pytest_terminal_summary(reporter)
    assert [line.split()[-1] for line in lines[1:4]] == ["defaults", "teaching", "hung"]
    assert lines[4].split() == ["450", "s", "CPU", "in", "all,", "less", "1", "suite(s)", "killed", "unmeasured"]
    monkeypatch.setattr(conftest, "SUITE_COSTS", [])
    lines.clear()
    pytest_terminal_summary(reporter)
    assert lines == []  # a session that ran no generated suite says nothing of them
