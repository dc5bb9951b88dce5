"""The suite's own command-line parser: options only as written, an unknown one named with the full options it was
close to, every mistake one line."""

import pytest

from lit_resformer.options import OptionParser, closest_options


def parser() -> OptionParser:
    parser = OptionParser(prog="lit-resformer plan")
    parser.add_argument("grid")
    parser.add_argument("--effect", type=float, required=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runs-dir")
    return parser


def refusal(capsys, argv: list[str]) -> list[str]:
    with pytest.raises(SystemExit) as refused:
        parser().parse_args(argv)
    assert refused.value.code == 2
    return capsys.readouterr().err.splitlines()


def test_options_written_in_full_are_taken():
    args = parser().parse_args(["g", "--effect", "-0.5", "--runs-dir=x", "--json"])
    assert (args.grid, args.effect, args.runs_dir, args.json) == ("g", -0.5, "x", True)


@pytest.mark.parametrize("argv", [["g", "--eff", "0.1"], ["g", "--effect", "0.1", "--js"], ["g", "--eff=0.1"]])
def test_an_abbreviation_is_refused_with_the_full_name(capsys, argv):
    """argparse would take `--eff` as `--effect`; here the user is told the full name, before the required option
    the abbreviation stood for is reported missing."""
    lines = refusal(capsys, argv)
    word = next(a for a in argv if a.startswith("--") and not a.startswith("--effect")).split("=")[0]
    full = {"--eff": "--effect", "--js": "--json"}[word]
    assert lines[0] == f"lit-resformer plan: error: unknown option {word} (options are not abbreviated; did you mean {full}?)"
    assert len(lines) == 1  # one line, no usage


def test_a_misspelt_option_names_the_closest(capsys):
    assert "unknown option --efect (did you mean --effect?)" in refusal(capsys, ["g", "--efect", "1"])[0]
    assert refusal(capsys, ["g", "--effect", "1", "--colour"])[0].endswith("unknown option --colour")


def test_what_follows_a_double_dash_is_no_option():
    assert parser().parse_args(["--effect", "1", "--", "--not-an-option"]).grid == "--not-an-option"


def test_other_mistakes_are_one_line_too(capsys):
    lines = refusal(capsys, ["g"])
    assert lines == ["lit-resformer plan: error: the following arguments are required: --effect"]


def test_closest_options_prefers_what_the_word_abbreviates():
    options = ["--run", "--runs-dir", "--rung"]
    assert closest_options("--runs", options) == ["--runs-dir"]
    assert closest_options("--rus-dir", options) == ["--runs-dir"]
    assert closest_options("--zzz", options) == []
