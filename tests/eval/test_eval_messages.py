"""`lit-resformer eval` without network and without offline data says how to prepare the data, in one line; the eval
tables of a grid's run name it grid/cell/seed."""

import json
import shutil

import pytest

from lit_resformer.cli import main
from lit_resformer.eval.run import evaluate_run_dir
from lit_resformer.runs.run_dir import RunDir
from tests.helpers.eval_data import go_offline


@pytest.mark.integration
def test_eval_without_network_or_offline_data_says_how_to_prepare_it(trained_run, tmp_path, monkeypatch, capsys):
    go_offline(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--ckpt", str(trained_run / "checkpoints/last.ckpt"), "--tasks", "arc_easy", "--limit", "1",
              "--out", str(tmp_path / "eval")])
    message = str(exit_info.value.code)
    assert message.startswith("lit-resformer eval: error: ") and "allenai/ai2_arc" in message  # what was unreachable
    assert "`lit-resformer eval prepare-data DIR` (or `make eval-data`)" in message and "--data-dir DIR" in message
    assert "\n" not in message
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert not (tmp_path / "eval/results.json").exists()


def test_run_names_of_grid_runs_and_of_other_folders(tmp_path):
    grid_run = RunDir(tmp_path / "runs/fig7/resformer/seed2")
    assert grid_run.name == "seed2"  # a folder like any other until its summary says which grid run it is
    grid_run.write_summary({"grid": "fig7", "cell": "resformer", "seed": 2, "status": "running"})
    assert grid_run.name == "fig7/resformer/seed2"
    assert RunDir(tmp_path / "runs/my-run").name == "my-run"
    assert RunDir(tmp_path / "seed-bank").name == "seed-bank"


def test_eval_tables_of_a_grid_run_name_the_run(trained_run, tmp_path, monkeypatch):
    go_offline(monkeypatch)
    run = tmp_path / "runs/fig7/resformer/seed0"
    shutil.copytree(trained_run, run)
    RunDir(run).write_summary({"grid": "fig7", "cell": "resformer", "seed": 0, "status": "done"})
    monkeypatch.setenv("LIT_RESFORMER_EVAL_TASKS", "lrf_tiny_mc")
    monkeypatch.setenv("LIT_RESFORMER_EVAL_LIMIT", "4")
    results = evaluate_run_dir(run)
    assert json.loads(results.read_text())["lit_resformer"]["name"] == "fig7/resformer/seed0"
    rows = [line for line in (run / "eval/zero_shot.md").read_text().splitlines() if line.startswith("| fig7")]
    assert [row.split(" | ")[:2] for row in rows] == [["| fig7/resformer/seed0", "acc"],
                                                      ["| fig7/resformer/seed0", "acc_norm"]]
