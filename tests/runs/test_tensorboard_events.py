"""`lit-resformer tensorboard`: committed runs' CSV metrics as TensorBoard runs, read back with TensorBoard's own
EventAccumulator, the reader `tensorboard --logdir` serves from."""

import csv
import json
import random
import re
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboard_masked_crc32c
from tensorboard.plugins.hparams import plugin_data_pb2

from lit_resformer.cli import main
from lit_resformer.runs.tensorboard_events import POINTS_PER_TAG, masked_crc32c, thinned, write_tensorboard

REPO = Path(__file__).resolve().parents[2]
TOKENS_PER_STEP = 512


def write_run(grid_dir: Path, cell: str, seed: int, status: str = "done", offset: float = 0.0, steps: int = 20) -> Path:
    """A finished run as a results folder keeps it: metrics in Lightning's CSV layout (training rows with the tokens
    seen and the step's time, validation on rows of their own, the references at step 0), config.yaml and
    summary.json."""
    run = grid_dir / cell / f"seed{seed}"
    (run / "csv/version_0").mkdir(parents=True)
    with open(run / "csv/version_0/metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["epoch", "step", "train/loss", "train/tokens_seen", "train/time",
                                               "val/loss", "val/loss/code", "val/unigram_loss"])
        writer.writeheader()
        writer.writerow({"step": 0, "val/loss": 8.0 + offset, "val/loss/code": 8.1, "val/unigram_loss": 7.0})
        for step in range(1, steps + 1):
            writer.writerow({"epoch": 0, "step": step, "train/loss": 6 - step / 10 + offset,
                             "train/tokens_seen": step * TOKENS_PER_STEP, "train/time": 0.1})
            if step % 10 == 0:
                writer.writerow({"step": step, "val/loss": 5 - step / 20 + offset, "val/loss/code": 5.1 - step / 20})
    config = {"seed_everything": seed, "trainer": {"max_steps": 20, "precision": "32-true", "logger": [{"x": 1}]},
              "model": {"lr": 0.002, "config": {"size": "tiny", "residual": {"target": "v" if cell != "vanilla" else "none",
                                                                             "layers": [2, 3]}}},
              "data": {"seq_len": 64, "source": "embedded"}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "summary.json").write_text(json.dumps({"grid": "g", "cell": cell, "seed": seed, "status": status,
                                                  "tokens_seen": 20 * TOKENS_PER_STEP, "params": 1234}))
    return run


@pytest.fixture
def grid_dir(tmp_path) -> Path:
    grid = tmp_path / "results/g"
    grid.mkdir(parents=True)
    (grid / "grid.yaml").write_text("version: 2\nname: g\ncells: []\n")
    for seed in (0, 1):
        write_run(grid, "vanilla", seed, offset=0.01 * seed)
        write_run(grid, "resformer", seed, offset=-0.05)
    write_run(grid, "resformer", 2, status="failed")  # not finished: not shown
    return grid


def events(folder: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return accumulator


def session_hparams(accumulator: EventAccumulator) -> dict:
    content = accumulator.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
            for name, value in start.hparams.items()}


def test_each_finished_run_is_a_tensorboard_run_named_grid_cell_seed(grid_dir, tmp_path):
    out, lines = write_tensorboard([grid_dir.parent], tmp_path / "tb")
    assert lines == ["g: 4 run(s) written, 0 up to date"]
    runs = sorted(str(p.parent.relative_to(out)) for p in out.rglob("events.out.tfevents.*"))
    assert runs == ["g/resformer/seed0", "g/resformer/seed1", "g/vanilla/seed0", "g/vanilla/seed1"]


def test_scalars_read_back_equal_the_csv_against_steps_and_tokens(grid_dir, tmp_path):
    out, _ = write_tensorboard([grid_dir], tmp_path / "tb")
    accumulator = events(out / "g/vanilla/seed1")
    tags = set(accumulator.Tags()["scalars"])
    assert tags == {"train/loss", "val/loss", "val/loss/code", "val/unigram_loss", "tokens/train/loss",
                    "tokens/val/loss", "tokens/val/loss/code"}  # only the loss curves against tokens; no bookkeeping
    train = [(e.step, e.value) for e in accumulator.Scalars("train/loss")]
    assert train == [(step, pytest.approx(6 - step / 10 + 0.01)) for step in range(1, 21)]
    val = [(e.step, e.value) for e in accumulator.Scalars("val/loss")]
    assert val == [(0, pytest.approx(8.01)), (10, pytest.approx(4.51)), (20, pytest.approx(4.01))]
    # against tokens: the tokens seen by each step (0 before the first training step)
    by_tokens = [(e.step, e.value) for e in accumulator.Scalars("tokens/val/loss")]
    assert by_tokens == [(0, pytest.approx(8.01)), (10 * TOKENS_PER_STEP, pytest.approx(4.51)),
                         (20 * TOKENS_PER_STEP, pytest.approx(4.01))]
    assert [e.step for e in accumulator.Scalars("tokens/train/loss")] == [s * TOKENS_PER_STEP for s in range(1, 21)]


def test_a_long_curve_keeps_the_points_tensorboard_keeps_evenly_spaced_with_its_first_and_last(tmp_path):
    grid = tmp_path / "results/g"
    grid.mkdir(parents=True)
    (grid / "grid.yaml").write_text("version: 2\nname: g\ncells: []\n")
    steps = POINTS_PER_TAG * 2 + 500
    write_run(grid, "vanilla", 0, steps=steps)
    out, _ = write_tensorboard([grid], tmp_path / "tb")
    shown = [e.step for e in events(out / "g/vanilla/seed0").Scalars("train/loss")]
    assert len(shown) == POINTS_PER_TAG and shown[0] == 1 and shown[-1] == steps
    gaps = {b - a for a, b in zip(shown, shown[1:], strict=False)}
    assert gaps <= {2, 3}  # evenly spaced: 2,500 steps in 999 gaps of 2 or 3
    assert thinned([(1, 1.0), (2, 2.0)], limit=5) == [(1, 1.0), (2, 2.0)]


def test_the_record_checksum_is_tensorboards():
    records = [bytes(random.Random(n).randrange(256) for _ in range(n % 70)) for n in range(500)]
    assert masked_crc32c(records).tolist() == [tensorboard_masked_crc32c(r) for r in records]


def test_the_run_carries_its_hyperparameters(grid_dir, tmp_path):
    out, _ = write_tensorboard([grid_dir], tmp_path / "tb")
    hparams = session_hparams(events(out / "g/resformer/seed1"))
    assert hparams["grid"] == "g" and hparams["cell"] == "resformer" and hparams["seed"] == 1
    assert hparams["model.lr"] == pytest.approx(0.002) and hparams["model.config.residual.target"] == "v"
    assert hparams["model.config.residual.layers"] == "[2, 3]"  # a list as text
    assert hparams["tokens"] == 20 * TOKENS_PER_STEP and hparams["params"] == 1234
    assert hparams["seed_everything"] == 1 and hparams["data.seq_len"] == 64 and hparams["trainer.max_steps"] == 20
    assert "trainer.logger" not in hparams  # where it wrote its logs tells runs apart by nothing


def test_rerunning_rewrites_nothing_that_is_up_to_date_and_never_duplicates_events(grid_dir, tmp_path):
    out, _ = write_tensorboard([grid_dir], tmp_path / "tb")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("events.out.tfevents.*")}
    assert write_tensorboard([grid_dir], tmp_path / "tb")[1] == ["g: 0 run(s) written, 4 up to date"]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("events.out.tfevents.*")} == before
    # a run whose metrics changed is written again, into one events file; a run gone from the results goes too
    metrics = grid_dir / "vanilla/seed0/csv/version_0/metrics.csv"
    metrics.write_text(metrics.read_text().replace(",5.9,", ",5.5,"))
    (grid_dir / "resformer/seed1/summary.json").unlink()
    assert write_tensorboard([grid_dir], tmp_path / "tb")[1] == ["g: 1 run(s) written, 2 up to date"]
    assert len(list((out / "g/vanilla/seed0").glob("events.out.tfevents.*"))) == 1
    assert events(out / "g/vanilla/seed0").Scalars("train/loss")[0].value == pytest.approx(5.5)
    assert not (out / "g/resformer/seed1").exists()


def test_the_command_writes_beside_the_results_by_default_and_tells_its_progress(grid_dir, capsys):
    main(["tensorboard", str(grid_dir)])
    printed = capsys.readouterr()
    assert printed.out == f"TensorBoard runs in {grid_dir / 'tensorboard'}; view them with: tensorboard --logdir " \
                          f"{grid_dir / 'tensorboard'}\n"
    assert re.fullmatch(r"runs 4/4, grid 1/1, \d+ s: g: 4 run\(s\) written, 0 up to date\n", printed.err)


def test_progress_lines_fit_the_terminal(grid_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    main(["tensorboard", str(grid_dir)])
    line = capsys.readouterr().err.rstrip("\n")
    assert len(line) <= 40 and line.startswith("runs 4/4, grid 1/1,") and line.endswith("…")
    assert (grid_dir / "tensorboard/g/vanilla/seed0").is_dir()


@pytest.mark.integration
def test_a_committed_grid_reads_back_run_by_run(tmp_path):
    """A committed grid (gzipped metrics, shared runs through links) as TensorBoard shows it: every finished run, its
    validation curve equal to the one its summary's final loss was read from."""
    from lit_resformer.runs.directory import GridDir

    grid = GridDir(REPO / "docs/results/fig5-repro")
    out, _ = write_tensorboard([grid.path], tmp_path / "tb")
    for cell, seed, run in grid.finished_runs():
        accumulator = events(out / "fig5-repro" / cell / f"seed{seed}")
        assert accumulator.Scalars("val/loss")[-1].value == pytest.approx(run.read_summary()["final_val_loss"], rel=1e-6)
        assert session_hparams(accumulator)["cell"] == cell
