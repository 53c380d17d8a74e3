"""breaks.run_pytest, which the mutation suites and the exercises run a break's test with: a pytest
forked from a process that imported torch once must see what a fresh `python -m pytest` would see
(the folder's code as it is on disk now, the environment and folder given), report what it did,
and leave nothing running after a timeout. Each server imports torch (seconds): the quick loop
(scripts/fast.sh) runs the first test only."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from conftest import breaks

PYTEST = ["-q", "-p", "no:cacheprovider"]


def servers_of(folder: Path) -> int:
    """How many fork servers run_pytest has started in `folder` (the module's others stay up until
    its end: conftest.fork_servers_stopped_at_the_end)."""
    return sum(key[0] == str(folder) for key in breaks._servers)


def write(folder: Path, **files: str) -> None:
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


def test_each_run_imports_the_folders_code_as_it_is_on_disk_then(tmp_path):
    """What a break needs: the code changed between two runs of one server is the code the second
    run tests (the server never imported it), and the change undone passes again."""
    write(tmp_path, **{"shape.py": "SIDES = 4\n", "test_shape.py": "import shape\n\n"
                       "def test_a_square_has_four_sides():\n    assert shape.SIDES == 4\n"})
    first = breaks.run_pytest(tmp_path, PYTEST)
    assert first.returncode == 0 and "1 passed" in first.stdout, first.stdout
    write(tmp_path, **{"shape.py": "SIDES = 3\n"})
    broken = breaks.run_pytest(tmp_path, PYTEST)
    assert broken.returncode == 1 and "1 failed" in broken.stdout and "assert 3 == 4" in broken.stdout
    write(tmp_path, **{"shape.py": "SIDES = 4\n"})
    assert breaks.run_pytest(tmp_path, PYTEST).returncode == 0
    assert servers_of(tmp_path) == 1  # all three from one server: the start was paid once


@pytest.mark.slow  # two servers: 6 s, which the quick loop leaves to the full suite
def test_a_run_has_the_folder_the_environment_and_the_import_path_it_was_given(tmp_path):
    (tmp_path / "lib").mkdir()
    write(tmp_path / "lib", **{"placed.py": "WHERE = 'lib'\n"})
    write(tmp_path, **{"test_where.py": "import os, sys\nimport placed\n\ndef test_where():\n"
                       "    print('cwd', os.getcwd(), 'colour', os.environ.get('COLOUR'), 'placed', placed.WHERE,\n"
                       "          'leftover', os.environ.get('PYTEST_LEFTOVER'), 'argv0', sys.argv[0])\n"})
    env = {**os.environ, "COLOUR": "teal", "PYTHONPATH": str(tmp_path / "lib"), "PYTEST_LEFTOVER": "1"}
    result = breaks.run_pytest(tmp_path, [*PYTEST, "-s"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    said = next(line for line in result.stdout.splitlines() if line.startswith("cwd "))
    assert said.split(" argv0 ")[0] == f"cwd {tmp_path} colour teal placed lib leftover None"
    assert said.endswith(os.path.join("pytest", "__main__.py"))  # as under `python -m pytest`
    # The control: another environment is another server, whose children do not have the first's.
    other = breaks.run_pytest(tmp_path, [*PYTEST, "-s"], {**env, "COLOUR": "rust"})
    assert "colour rust" in other.stdout and servers_of(tmp_path) == 2


@pytest.mark.slow  # a server's start: the quick loop leaves it to the full suite
def test_each_run_draws_its_global_random_states_anew_as_a_fresh_process_does(tmp_path):
    """Python's `random` and NumPy's global generator are seeded from the OS in a fresh process;
    two children of one server must not start from their parent's state (a test that forgot to
    seed would pass in each break's run by luck the same way)."""
    write(tmp_path, **{"test_draw.py": "import random\nimport numpy\n\ndef test_draw():\n"
                       "    print('draws', random.getrandbits(62), numpy.random.randint(2**62))\n"})
    draws = [next(line for line in breaks.run_pytest(tmp_path, [*PYTEST, "-s"]).stdout.splitlines()
                  if line.startswith("draws ")).split()[1:] for _ in range(2)]
    assert servers_of(tmp_path) == 1
    assert draws[0][0] != draws[1][0] and draws[0][1] != draws[1][1], draws


@pytest.mark.slow
def test_the_exit_status_is_pytests_and_stderr_is_kept_apart(tmp_path):
    write(tmp_path, **{"test_nothing.py": "import sys\nprint('to stderr', file=sys.stderr)\n"})
    result = breaks.run_pytest(tmp_path, PYTEST)
    assert result.returncode == 5 and "no tests ran" in result.stdout  # 5: none collected
    assert "to stderr" not in result.stdout


@pytest.mark.slow  # waits out its timeout: 10 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc: Linux only")
def test_a_run_past_its_timeout_is_killed_with_the_processes_it_started(tmp_path):
    """A hung break's test ends the verdict, not the suite, and leaves no process behind."""
    write(tmp_path, **{"test_hangs.py": "import subprocess, time\nfrom pathlib import Path\n\n"
                       "def test_hangs():\n    child = subprocess.Popen(['sleep', '1000'])\n"
                       "    Path('child.pid').write_text(str(child.pid))\n    time.sleep(1000)\n"})
    # The kill must come after the test wrote its pid file: on a loaded machine the child may take
    # longer than 10 s to get there, and then the run is tried again with a longer timeout.
    for timeout in (10, 60, 300):
        result = breaks.run_pytest(tmp_path, PYTEST, timeout=timeout)
        if (tmp_path / "child.pid").exists():
            break
    assert result.returncode == -9  # SIGKILL
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 60  # the kill is sent; its arrival is a state to wait for
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z":
        assert time.monotonic() < deadline, f"sleep {pid} outlived the run's timeout"
        time.sleep(0.05)
