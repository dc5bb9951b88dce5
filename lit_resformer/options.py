"""The suite's command-line parsers: an option is written in full or refused with the full names it was close to.

argparse takes any unambiguous prefix of an option (`--eff 0.1` for `--effect`), so a misspelt option silently
becomes another one. `OptionParser` takes options only as written, and names the options an unknown one abbreviates
or resembles, before anything else is said about the command line (a missing required option included: the user
who typed `--eff` did give it, abbreviated). Every error is one line.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable, Sequence

OPTION = re.compile(r"^--?[A-Za-z][\w.-]*")  # an option word, not a negative number


def closest_options(word: str, options: Iterable[str]) -> list[str]:
    """The options `word` (an unknown option, `=value` included or not) abbreviates, else those it resembles."""
    name = word.split("=", 1)[0]
    options = sorted(options)
    longer = [option for option in options if option.startswith(name) and len(option) > len(name)]
    return longer or difflib.get_close_matches(name, options, n=3)


def unknown_option_message(word: str, options: Iterable[str]) -> str:
    """One line for an option the parser does not have, naming the full options it abbreviates or resembles."""
    name = word.split("=", 1)[0]
    close = closest_options(name, options)
    if not close:
        return f"unknown option {name}"
    abbreviated = "options are not abbreviated; " if close[0].startswith(name) else ""
    return f"unknown option {name} ({abbreviated}did you mean {' or '.join(close)}?)"


class OptionParser(argparse.ArgumentParser):
    """argparse without abbreviations: an unknown option is an error naming the options it was close to, and every
    error is one line."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):
        words = list(sys.argv[1:] if args is None else args)
        for word in words[: words.index("--")] if "--" in words else words:
            if OPTION.match(word) and word.split("=", 1)[0] not in self._option_string_actions:
                self.error(unknown_option_message(word, self._option_string_actions))
        return super().parse_args(args, namespace)

    def error(self, message: str):
        """One line, instead of argparse's usage (some commands' usage is 20 lines)."""
        self.exit(2, f"{self.prog}: error: {message}\n")
