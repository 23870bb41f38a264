"""getopt_long work-alike and #SBATCH/#PBS directive extraction."""

from __future__ import annotations

import pytest

from corral.frontends.directives import DirectiveError, directive_words, split_words
from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.frontends.slurm_table import SBATCH_TABLE, SRUN_TABLE

T = OptionTable.of([
    Opt("time", ("time",), "t"),
    Opt("nodes", ("nodes",), "N"),
    Opt("jobs", ("jobs",), "j"),
    Opt("verbose", ("verbose",), "v", Arg.NONE),
    Opt("hold", ("hold",), "H", Arg.NONE),
    Opt("nice", ("nice",), None, Arg.OPTIONAL),
    Opt("mem", ("mem",), None),
    Opt("mem_per_cpu", ("mem-per-cpu",), None),
    Opt("cluster", ("clusters", "cluster"), "M"),
])


def keys(argv: list[str], **kw: bool) -> tuple[list[tuple[str, str | None]], list[str]]:
    parsed, rest = getopt_long(argv, T, "prog", **kw)
    return [(p.opt.key, p.value) for p in parsed], rest


@pytest.mark.parametrize(
    ("argv", "expect", "rest"),
    [
        (["--time=5"], [("time", "5")], []),
        (["--time", "5"], [("time", "5")], []),
        (["-t", "00:30:00"], [("time", "00:30:00")], []),
        (["-t00:30:00"], [("time", "00:30:00")], []),
        (["-N2"], [("nodes", "2")], []),
        (["-vvH"], [("verbose", None), ("verbose", None), ("hold", None)], []),
        (["-vN", "3"], [("verbose", None), ("nodes", "3")], []),
        (["--job", "1,2"], [("jobs", "1,2")], []),  # unambiguous prefix
        (["--ti=1"], [("time", "1")], []),
        (["--mem=4G"], [("mem", "4G")], []),  # exact match beats the prefix of mem-per-cpu
        (["--clust=a"], [("cluster", "a")], []),  # two names of one option: not ambiguous
        (["--nice"], [("nice", None)], []),
        (["--nice=5"], [("nice", "5")], []),
        (["--nice", "5"], [("nice", None)], ["5"]),  # optional arg must be attached
        (["-t", "-5"], [("time", "-5")], []),  # a required argument may start with '-'
        (["script.sh", "-t", "5"], [], ["script.sh", "-t", "5"]),
        (["-t", "5", "--", "-N", "2"], [("time", "5")], ["-N", "2"]),
        (["-"], [], ["-"]),
    ],
)
def test_getopt_forms(argv: list[str], expect: list[tuple[str, str | None]],
                      rest: list[str]) -> None:
    assert keys(argv) == (expect, rest)


def test_permute_mode_collects_positionals() -> None:
    assert keys(["a", "-t", "1", "b"], stop_at_positional=False) == ([("time", "1")], ["a", "b"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--no-such-option"], "prog: unrecognized option '--no-such-option'"),
        (["--no-such=3"], "prog: unrecognized option '--no-such=3'"),
        (["-Z"], "prog: invalid option -- 'Z'"),
        (["-t"], "prog: option requires an argument -- 't'"),
        (["--time"], "prog: option '--time' requires an argument"),
        (["--verbose=1"], "prog: option '--verbose' doesn't allow an argument"),
        (["--me=1"], "prog: option '--me=1' is ambiguous; possibilities: '--mem' "
                     "'--mem-per-cpu'"),
    ],
)
def test_getopt_errors_match_glibc(argv: list[str], message: str) -> None:
    with pytest.raises(GetoptError) as exc:
        getopt_long(argv, T, "prog")
    assert exc.value.message == message


def test_tables_differ_per_command() -> None:
    assert SBATCH_TABLE.short("u") is not None and SBATCH_TABLE.short("u").key == "usage"
    assert SRUN_TABLE.short("u") is not None and SRUN_TABLE.short("u").key == "unbuffered"
    assert SBATCH_TABLE.short("W").arg is Arg.NONE  # type: ignore[union-attr]
    assert SRUN_TABLE.short("W").arg is Arg.REQUIRED  # type: ignore[union-attr]
    assert SRUN_TABLE.short("l") is not None and SBATCH_TABLE.short("l") is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("  -J  name  -t 5 ", ["-J", "name", "-t", "5"]),
        ('--output="/data/some dir/x.log"', ["--output=/data/some dir/x.log"]),
        ("--output=/data/some\\ data/x.log", ["--output=/data/some data/x.log"]),
        ("-J 'a b' # a comment -t 5", ["-J", "a b"]),
        ("--comment='x # y'", ["--comment=x # y"]),
        ("", []),
    ],
)
def test_split_words(text: str, words: list[str]) -> None:
    assert split_words(text) == words


def test_unmatched_quote_names_the_line() -> None:
    with pytest.raises(DirectiveError) as exc:
        directive_words("#!/bin/sh\n#SBATCH -J 'oops\n")
    assert exc.value.lineno == 2
    assert "Unmatched `'`" in exc.value.message


def test_directives_stop_at_first_command() -> None:
    script = (
        "#!/bin/bash\n"
        "\n"
        "# Parameters\n"
        "#SBATCH --job-name=a\n"
        "   # indented comment\n"
        "#SBATCH -a 1 --signal=KILL\n"
        "  #SBATCH --not-a-directive (indented)\n"
        "echo start\n"
        "#SBATCH --ignored\n"
    )
    assert directive_words(script) == ["--job-name=a", "-a", "1", "--signal=KILL"]


def test_pbs_prefix_and_deprecated_slurm_prefix() -> None:
    script = "#!/bin/sh\n#PBS -N x\n#SLURM -t 5\n#SBATCH -p a\ncmd\n"
    assert directive_words(script, ("#PBS",)) == ["-N", "x"]
    assert directive_words(script, ("#SBATCH", "#SLURM")) == ["-t", "5", "-p", "a"]


def test_crlf_lines_are_tolerated_by_the_scanner() -> None:
    assert directive_words("#!/bin/sh\r\n#SBATCH -J a\r\necho\r\n") == ["-J", "a"]
