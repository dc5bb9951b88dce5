"""`lit-resformer claims`: one output mode a call. Each mode prints what its renderer makes of the board's rows, --json
is a format of the board, --comparisons, --transfer and --preconditions only, a conflicting pair is refused in one
line before any grid is read, and --preconditions dates the comparisons of every runs folder given."""

from __future__ import annotations

import io
import itertools
import json

import pytest

from lit_resformer.board import declared, transfer
from lit_resformer.board import scoreboard as board
from lit_resformer.board.findings import findings_markdown
from lit_resformer.cli import CLAIMS_MODES, JSON_MODES, main
from lit_resformer.verdicts import paper_claims as pc
from lit_resformer.verdicts.rendering import markdown
from lit_resformer.verdicts.scoreboard_rows import scoreboard
from tests.helpers.claims_grids import judged_grid


def _claims_json(rows, claims):
    return json.dumps({"counts": pc.claim_counts(claims), "headline_regime": pc.headline_regime(claims),
                       "claims": [c.to_dict() for c in claims]}, indent=2, default=str) + "\n"


def _markdown_page(rows, claims):
    table = transfer.markdown(claims)
    return pc.markdown(claims) + (f"\n## Transfer: each verdict by regime\n\n{table}" if table else "")


# each valid call and what it prints: the renderer of its mode (and format) applied to the board's rows
PRINTED = {
    ("--json",): _claims_json,
    ("--markdown",): _markdown_page,
    ("--findings",): lambda rows, claims: findings_markdown(rows),
    ("--comparisons",): lambda rows, claims: markdown(rows),
    ("--comparisons", "--json"): lambda rows, claims: json.dumps([v.to_dict() for v in rows], indent=2) + "\n",
    ("--transfer",): lambda rows, claims: transfer.markdown(claims),
    ("--transfer", "--json"): lambda rows, claims: json.dumps(
        [r.to_dict() for r in transfer.transfer_rows(claims)[1]], indent=2, default=str) + "\n",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two grids in one runs folder, one of them a transfer grid (the transfer table has a row)."""
    tmp_path = tmp_path_factory.mktemp("claims-modes")
    judged_grid(tmp_path, "g", paper_claim="table5-lower-loss")
    judged_grid(tmp_path, "transfer-g", tokens=8_000_000, corpus="code", paper_claim="table5-lower-loss")
    return tmp_path / "runs"


@pytest.mark.parametrize("flags", PRINTED, ids=" ".join)
def test_each_mode_prints_its_renderer_of_the_board(runs, capsys, flags):
    rows = scoreboard([runs])
    expected = PRINTED[flags](rows, pc.paper_claims(rows))
    assert expected.strip()
    main(["claims", str(runs), *flags])
    assert capsys.readouterr().out == expected


def test_without_a_mode_the_board_is_written_where_out_says(runs, tmp_path, capsys):
    out = tmp_path / "board.txt"
    main(["claims", str(runs), "--out", str(out)])
    claims = pc.paper_claims(scoreboard([runs]))
    assert out.read_text() == board.terminal_text(claims, width=120)
    assert capsys.readouterr().out == f"{out} written: {pc.counts_line(pc.claim_counts(claims), 'paper')}\n"


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, as a shell's is."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("flags", [(), ("--json",)], ids=["board", "json"])
def test_judging_talks_on_stderr_and_stdout_stays_what_it_is_without_a_word_of_progress(runs, capsys, monkeypatch,
                                                                                        flags):
    """Judging the grids counts them on stderr: a plain line at the start, each tenth and the end where stderr is no
    terminal (here every grid of two), tqdm's bar on a terminal; stdout is the board as the renderer makes it from
    the rows judged without progress, byte for byte."""
    monkeypatch.setenv("COLUMNS", "100")  # the board (no option) is sized by Rich: COLUMNS where stdout is no terminal
    rows = scoreboard([runs])
    claims = pc.paper_claims(rows)
    board_alone = _claims_json(rows, claims) if flags else board.terminal_text(claims, width=100)
    main(["claims", str(runs), *flags])
    printed = capsys.readouterr()
    assert printed.out == board_alone
    assert [line.split(",")[0] for line in printed.err.splitlines()] == [
        f"judging grids: {done}/2 grids" for done in (0, 1, 2)]
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    main(["claims", str(runs), *flags])
    assert capsys.readouterr().out == board_alone
    drawn = terminal.getvalue()
    assert "\r" in drawn and "judging grids: 100%" in drawn and "2/2" in drawn and "\n" not in drawn.rstrip("\n")


def _option(mode: str) -> list[str]:
    return ["--html", "board.html"] if mode == "html" else [f"--{mode}"]


CONFLICTS = [(*_option(a), *_option(b)) for a, b in itertools.combinations(CLAIMS_MODES, 2)]
CONFLICTS += [("--json", *_option(mode)) for mode in CLAIMS_MODES if mode not in JSON_MODES]
CONFLICTS += [("--html", "board.html", "--out", "board.txt")]


@pytest.mark.parametrize("flags", CONFLICTS, ids=" ".join)
def test_a_conflicting_pair_is_refused_in_one_line_before_any_grid_is_read(tmp_path, capsys, flags):
    # the runs folder does not exist: a call that went past its arguments would say so instead
    with pytest.raises(SystemExit) as refused:
        main(["claims", str(tmp_path / "missing"), *flags])
    assert refused.value.code == 2
    first = capsys.readouterr().err.splitlines()[0]
    named = [flag for flag in flags if flag.startswith("--")]
    assert "not allowed with argument" in first and all(flag in first for flag in named), first


def test_the_modes_that_take_json_and_those_that_do_not_are_all_the_modes():
    assert set(JSON_MODES) - {None} < set(CLAIMS_MODES)
    assert len(CONFLICTS) == 15 + 3 + 1


def test_preconditions_read_every_runs_folder_given(tmp_path, monkeypatch, capsys):
    """`claims A B --preconditions` dates the declarations of the grids of A and of B (each folder handed on; what
    one folder yields is tests/board/test_declared.py's)."""
    first, second = judged_grid(tmp_path / "a", "g"), judged_grid(tmp_path / "b", "h")
    handed = []

    def report(roots, counted=None):
        handed.append([str(root) for root in roots])
        return []

    monkeypatch.setattr(declared, "declaration_report", report)
    main(["claims", str(first), str(second), "--preconditions", "--json"])
    assert handed == [[str(first), str(second)]]
    assert capsys.readouterr().out == declared.as_json([])
