"""What a new user meets first: `lit-resformer --help` and every command's own help, `grid --dry-run` showing what
each cell changes, Ctrl-C on a grid, and the runner's one-line messages. Grids here train with the fake trainer of
tests/helpers/fake_trainer.py (the `lit-resformer fit` contract without Lightning)."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import targets
from benchmarks.cli_refusal import refused
from lit_resformer.cli import SUITE_COMMANDS, main
from lit_resformer.config.field_checks import accelerator_problem
from lit_resformer.grids import GridOptions, load_grid, run_grid
from lit_resformer.training.lightning_cli import ResFormerCLI
from tests.helpers.fake_trainer import THREE_CELLS, alive, calls, summary, write_grid

REPO = Path(__file__).resolve().parents[1]
# Every command `lit-resformer` dispatches: the suite's and the LightningCLI's.
COMMANDS = [*ResFormerCLI.subcommands(), *SUITE_COMMANDS]


def help_text(capsys, argv: list[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"], ["-h"], []])
def test_help_lists_every_command_with_one_line(capsys, argv):
    code, text = help_text(capsys, argv)
    assert code == (0 if argv else 2)
    listed = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and line.strip()}
    assert set(listed) == set(COMMANDS)
    assert all(len(line.split()) > 2 for line in listed.values())  # a description beside each name
    assert "predict" not in COMMANDS  # the module has no prediction step, so Lightning's predict is not offered


def test_readme_shows_the_help_as_it_is(capsys):
    _, text = help_text(capsys, ["--help"])
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"$ lit-resformer --help\n{text}```" in readme


def test_the_documents_a_reader_opens_first_stay_short():
    """The README is what it is, the two commands, the three uses and links (12 KB, OLMo-core's size); the results log
    keeps the dated entries a reader finishes (60 KB), older passes left to git history."""
    root = Path(__file__).resolve().parents[1]
    assert len((root / "README.md").read_bytes()) <= 12 * 1024
    assert len((root / "docs" / "RESULTS.md").read_bytes()) <= 60 * 1024


def test_lit_resformer_is_the_only_command_line():
    """`lit-resformer` imports the grid runner, eval, export and benchmarks only inside the command that runs them,
    and the runner's own package has no second entry point."""
    loaded = subprocess.run([sys.executable, "-c", "import sys, lit_resformer.cli; print(' '.join(sys.modules))"],
                            capture_output=True, text=True, timeout=120, check=True).stdout.split()
    suites = ("lit_resformer.grids", "benchmarks", "lit_resformer.eval", "lit_resformer.export")
    assert [name for name in loaded if name in suites or name.startswith(tuple(s + "." for s in suites))] == []
    assert not (Path(__file__).resolve().parents[1] / "lit_resformer" / "ablations" / "__main__.py").exists()


HELP_CALLS = [[c, "--help"] for c in COMMANDS if c != "lm-eval"] + [["eval", "prepare-data", "--help"]]


@pytest.mark.parametrize("argv", HELP_CALLS)
def test_every_command_has_its_own_help(capsys, argv):
    code, text = help_text(capsys, argv)
    assert code == 0
    assert "usage:" in text
    assert "%%" not in text  # a description is printed as written: "95%%" there reads "95%%", not "95%"
    if argv[0] in ("fit", "validate", "test"):
        assert "--trainer.max_steps" in text and "--model.config.residual.target" in text
    elif argv[0] == "eval" and len(argv) == 2:
        assert "lit-resformer eval prepare-data DIR" in " ".join(text.split())  # where offline data comes from


@pytest.mark.integration
def test_lm_eval_help_adds_lm_evals_own():
    # in a process of its own: lm-eval's command line sets up logging handlers on the streams it is given
    shown = subprocess.run([sys.executable, "-m", "lit_resformer.cli", "lm-eval", "--help"], capture_output=True,
                           text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "usage: lit-resformer lm-eval" in shown.stdout and "--model_args" in shown.stdout


def test_unknown_command_is_one_line_with_a_suggestion(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["gird", "configs/grids/demo.yaml"])
    assert str(exit_info.value.code).startswith("lit-resformer: error: unknown command 'gird'; did you mean 'grid'?")


def test_dry_run_shows_what_each_cell_changes_relative_to_the_base(tmp_path, fake, capsys):
    # BASE has trainer.max_steps 20, model.lr 6e-4 and no residual (the default target "none").
    grid = write_grid(tmp_path, {
        "baseline": "vanilla",
        "overrides": {"trainer.max_steps": 30},
        "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v", "model.lr": 1e-3},
                  "same-lr": {"model.lr": 6.0e-4}},  # sets the base's own value: no change
    })
    out = tmp_path / "dry.txt"
    with open(out, "w") as f:
        run_grid(load_grid(grid), GridOptions(runs_dir=tmp_path / "runs", train_command=fake, dry_run=True), out=f)
    listing = out.read_text().split("what each cell changes relative to the base experiment")[1].splitlines()[1:-1]
    assert listing == [
        "  every cell:",
        "      trainer.max_steps: 20 -> 30",
        "  vanilla: nothing else",
        "  resformer:",
        '      model.config.residual.target: "none" -> "v"',
        "      model.lr: 0.0006 -> 0.001",
        "  same-lr: nothing else",
    ]


def test_diverged_run_is_reported_without_a_doubled_prefix(tmp_path, fake, capsys):
    outcome = run_grid(load_grid(write_grid(tmp_path, THREE_CELLS)),
                       GridOptions(runs_dir=tmp_path / "runs", train_command=fake), progress=False)
    assert summary(tmp_path / "runs/g/boom/seed0")["error"] == "non-finite loss at step 3"
    printed = capsys.readouterr().out
    assert "g/boom/seed0: diverged: non-finite loss at step 3" in printed
    assert "diverged: diverged" not in printed
    assert outcome.failed == []


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and the parent-death signal")
def test_ctrl_c_on_a_grid_marks_the_run_interrupted_and_a_rerun_resumes_it(tmp_path, fake):
    grid = write_grid(tmp_path, {"baseline": "vanilla", "cells": {"vanilla": {}, "resformer": {"model.config.residual.target": "v"}}})
    runs = tmp_path / "runs"
    run_dir = runs / "g/vanilla/seed0"
    env = {**os.environ, "LIT_RESFORMER_TRAIN_CMD": shlex.join(fake), "FAKE_STEP_SLEEP": "0.2"}  # 20 steps: ~4 s
    # Its own session, so that SIGINT to the session's process group is what Ctrl-C in a terminal sends.
    runner = subprocess.Popen([sys.executable, "-m", "lit_resformer.cli", "grid", str(grid), "--runs-dir", str(runs)],
                              env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (run_dir / "checkpoints/last.ckpt").exists():
        assert time.time() < deadline and runner.poll() is None
        time.sleep(0.1)
    os.killpg(runner.pid, signal.SIGINT)
    stdout, stderr = runner.communicate(timeout=60)

    assert runner.returncode == 130
    assert stdout.splitlines()[-1] == "interrupted; rerun the same command to resume"
    assert "Traceback" not in stdout + stderr
    interrupted = summary(run_dir)
    assert interrupted["status"] == "interrupted" and interrupted["error"] is None
    assert not alive(calls(run_dir)[0]["pid"])  # the runner stopped its trainer before it exited
    assert not (runs / "g/resformer/seed0/summary.json").exists()  # the next run never started

    rerun = subprocess.run([sys.executable, "-m", "lit_resformer.cli", "grid", str(grid), "--runs-dir", str(runs),
                            "--no-report"], env={**env, "FAKE_STEP_SLEEP": "0"}, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert calls(run_dir)[1]["argv"][-2:] == ["--ckpt_path", "last"]
    resumed = summary(run_dir)
    assert resumed["status"] == "done" and resumed["attempts"] == 2 and resumed["resumed"]
    assert summary(runs / "g/resformer/seed0")["status"] == "done"


def test_runner_stops_its_trainer_as_ctrl_c_would(tmp_path):
    """A trainer that ignores nothing: stopped with SIGINT, it exits through KeyboardInterrupt (Lightning's clean
    shutdown); the runner records the attempt as interrupted, not failed."""
    import threading

    from lit_resformer.execution.jobs import RunJob, execute

    script = tmp_path / "trainer.py"
    script.write_text("import sys, time\nprint('started', flush=True)\ntime.sleep(60)\n")
    job = RunJob("g", "c", 0, tmp_path / "run", [sys.executable, str(script)])
    stop = threading.Event()
    stdout = tmp_path / "run/logs/stdout.log"

    def stop_once_started():  # not on a timer: under load Python may not have its SIGINT handler yet at 2 s
        while not (stdout.exists() and "started" in stdout.read_text()):
            time.sleep(0.1)
        stop.set()

    threading.Thread(target=stop_once_started, daemon=True).start()
    started = time.monotonic()
    result = execute(job, stop=stop)
    assert time.monotonic() - started < 30
    assert result["status"] == "interrupted"
    assert "KeyboardInterrupt" in (tmp_path / "run/logs/stderr.log").read_text()
    assert json.loads((tmp_path / "run/summary.json").read_text())["status"] == "interrupted"
    assert Path(tmp_path / "run/logs/stdout.log").read_text().rstrip().endswith("started")


# Bad input refused before the command imports what does the work: (arguments, words of the refusal). TMP is a
# folder with nothing in it but `unknown-field.yaml`, a grid file with a field that does not exist; REPO the checkout.
FAST_REFUSALS = {
    "grid, missing file": (["grid", "TMP/missing.yaml", "--dry-run"], "grid file not found"),
    "grid, unknown field": (["grid", "TMP/unknown-field.yaml", "--dry-run"], "unknown field(s) ['seedz']"),
    "grid, abbreviated option": (["grid", "REPO/configs/grids/demo.yaml", "--dry-ru"], "did you mean --dry-run?"),
    "report, missing folder": (["report", "TMP/missing"], "TMP/missing: no such folder"),
    "report, folder of grids": (["report", "REPO/docs"], "REPO/docs is not a grid run directory"),
    "claims, missing folder": (["claims", "TMP/missing"], "TMP/missing holds no grid run directory"),
    "plan, abbreviated option": (["plan", "TMP/missing", "--eff", "0.1"], "did you mean --effect?"),
    "fit, missing config": (["fit", "--config", "TMP/missing.yaml"], "--config TMP/missing.yaml: no such file"),
    # a misspelt field, a negative step count and a missing accelerator, decided by fit's recorded parser and checks (lit_resformer.config.quick_check)
    "fit, abbreviated option": (["fit", "--config", "REPO/configs/experiments/cpu-demo-resformer.yaml",
                                 "--trainer.max_step", "5"], "did you mean ['max_steps'"),
    "fit, negative max_steps": (["fit", "--config", "REPO/configs/experiments/cpu-demo-resformer.yaml",
                                 "--trainer.max_steps", "-5"], "trainer.max_steps=-5 is out of range"),
    "fit, gpu on a machine without one": (["fit", "--config", "REPO/configs/experiments/cpu-demo-resformer.yaml",
                                           "--trainer.accelerator", "gpu"], "no GPU can be used here"),
    "eval, missing checkpoint": (["eval", "--ckpt", "TMP/missing.ckpt"], "no such checkpoint file"),
}


@pytest.mark.parametrize("case", FAST_REFUSALS)
def test_bad_input_is_refused_at_once_in_one_line_leaving_nothing(tmp_path, case):
    """In a fresh process in an empty folder (benchmarks/cli_refusal.refused: refused with the words, one line on
    stderr, nothing on stdout, nothing written), within the benchmark's target of CPU seconds: the user + system time
    of the process, which a loaded machine does not inflate as it does the wall time."""
    argv, words = FAST_REFUSALS[case]
    if "--trainer.accelerator" in argv and accelerator_problem("gpu") is None:
        pytest.skip("a machine with a GPU trains with it")
    (tmp_path / "unknown-field.yaml").write_text(
        f"name: refused\nbase: {REPO}/configs/experiments/cpu-base.yaml\nbaseline: a\ncells: {{a: {{}}}}\nseedz: [0]\n")

    def real(text: str) -> str:
        return text.replace("TMP", str(tmp_path)).replace("REPO", str(REPO))

    _, cpu_seconds = refused([real(arg) for arg in argv], real(words))
    limit = targets.target("cli_refusal.fast", cuda=False)
    assert cpu_seconds <= limit, f"refused after {cpu_seconds:.2f} CPU seconds (target {limit} s)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unknown-field.yaml"]


def test_refusing_a_grid_file_imports_no_heavy_library(tmp_path):
    """What makes refusals fast, stated directly: the modules the argument checks import bring no torch, Lightning,
    pandas or matplotlib with them."""
    probe = ("import sys\nfrom lit_resformer.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print(' '.join(m for m in ('torch', 'lightning', 'pandas', 'matplotlib') if m in sys.modules))")
    for argv in (["grid", str(tmp_path / "missing.yaml"), "--dry-run"], ["report", str(tmp_path)],
                 ["claims", str(tmp_path)], ["fit", "--config", str(tmp_path / "missing.yaml")]):
        loaded = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120,
                                cwd=Path(__file__).resolve().parents[1]).stdout.strip()
        assert loaded == "", f"{argv[0]} imported {loaded}"


# Each suite command that has long options, with one of them abbreviated, and the full name it must suggest.
ABBREVIATED = {
    "grid": (["configs/grids/demo.yaml", "--dry-ru"], "--dry-run"),
    "report": (["docs/results/fig7-evidence", "--h"], "--help"),
    "claims": (["docs/results", "--mark"], "--markdown"),
    "plan": (["docs/results/fig7-evidence", "--eff", "1"], "--effect"),
    "scaling": (["docs/results", "--metr", "val"], "--metric"),
    "eval": (["--ckp", "x.ckpt"], "--ckpt"),
    "export": (["--ckpt", "x.ckpt", "--to", "out"], "--to-hf"),
    "analyze": (["--ckpt", "x.ckpt", "--num-seq", "4"], "--num-seqs"),
    "export-results": (["docs/results/fig7-evidence", "--ou", "out"], "--out"),
    "merge-results": (["a.tar.gz", "docs/results", "--h"], "--help"),
    "add-references": (["docs/results", "--h"], "--help"),
    "rederive": (["docs/results/fig7-evidence", "--cell", "vanilla"], "--cells"),
    "tensorboard": (["docs/results/fig7-evidence", "--ou", "out"], "--out"),
    "prepare-corpus": (["out", "--min", "5"], "--min-chars"),
    "fit-stacked": (["--ru", "a.yaml", "runs/a"], "--run"),
    "generate": (["--ckpt", "x.ckpt", "--prompt", "a", "--max-new", "4"], "--max-new-tokens"),
}


def test_every_suite_command_is_in_the_abbreviation_table():
    assert set(ABBREVIATED) == set(SUITE_COMMANDS) - {"lm-eval"}  # lm-eval's options are lm-eval's own parser's


@pytest.mark.parametrize("command", ABBREVIATED)
def test_suite_commands_refuse_abbreviated_options_and_name_the_full_one(capsys, command):
    argv, full = ABBREVIATED[command]
    with pytest.raises(SystemExit) as refused:
        main([command, *argv])
    assert refused.value.code == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert "options are not abbreviated" in first and f"did you mean {full}" in first, first
