"""A GNU ``getopt_long`` work-alike with glibc's exact diagnostics.

Slurm's and PBS's commands parse their flags with glibc ``getopt_long``; clients rely on
its details (``--job 1,2`` as an abbreviation of ``--jobs``, ``-N2``, ``-vvv``,
``--time=5`` and ``--time 5``), and tests compare its error text. This module implements
the same rules for one option table:

- ``--name=value`` and ``--name value`` (required argument), ``--name=value`` only (optional
  argument); any unambiguous prefix of a long name is accepted, an exact match always wins,
  and prefixes that all lead to the same option are not ambiguous;
- ``-x``, ``-xVALUE``, ``-x VALUE``, clustered flags ``-vvQ``; an optional argument of a
  short option must be attached (``-kVALUE``);
- with ``stop_at_positional`` (getopt's ``+`` mode, as sbatch/srun/qsub use) parsing stops
  at the first word that is not an option; otherwise positionals are collected and
  parsing continues (GNU permutation); ``--`` always ends the options;
- errors raise ``GetoptError`` whose ``message`` is the line glibc prints
  (``sbatch: unrecognized option '--foo'``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum


class Arg(Enum):
    NONE = 0
    REQUIRED = 1
    OPTIONAL = 2


@dataclass(frozen=True, slots=True)
class Opt:
    """One option: a canonical ``key``, its long names (without ``--``) and short letter."""

    key: str
    long: tuple[str, ...] = ()
    short: str | None = None
    arg: Arg = Arg.REQUIRED


@dataclass(frozen=True, slots=True)
class Parsed:
    """One option occurrence: which option, its argument and how it was spelled."""

    opt: Opt
    value: str | None
    spelled: str  # "--time", "-t"


class GetoptError(ValueError):
    def __init__(self, message: str, word: str) -> None:
        super().__init__(message)
        self.message = message
        self.word = word  # the offending command-line word


@dataclass(frozen=True)
class OptionTable:
    opts: tuple[Opt, ...]
    _by_long: dict[str, Opt] = field(init=False, repr=False, compare=False)
    _by_short: dict[str, Opt] = field(init=False, repr=False, compare=False)
    _by_key: dict[str, Opt] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_long: dict[str, Opt] = {}
        by_short: dict[str, Opt] = {}
        for o in self.opts:
            for name in o.long:
                if name in by_long:
                    raise ValueError(f"duplicate long option --{name}")
                by_long[name] = o
            if o.short is not None:
                if o.short in by_short:
                    raise ValueError(f"duplicate short option -{o.short}")
                by_short[o.short] = o
        object.__setattr__(self, "_by_long", by_long)
        object.__setattr__(self, "_by_short", by_short)
        object.__setattr__(self, "_by_key", {o.key: o for o in self.opts})

    @staticmethod
    def of(opts: Iterable[Opt]) -> OptionTable:
        return OptionTable(tuple(opts))

    def short(self, ch: str) -> Opt | None:
        return self._by_short.get(ch)

    def by_key(self, key: str) -> Opt | None:
        """The option whose ``key`` this is (the last one, when several share it)."""
        return self._by_key.get(key)

    def long_names(self) -> dict[str, Opt]:
        return dict(self._by_long)

    def lookup_long(self, prog: str, name: str, text: str) -> tuple[Opt, str]:
        """Resolve ``name`` (no ``--``) to an option and its full long name."""
        exact = self._by_long.get(name)
        if exact is not None:
            return exact, name
        matches = [(n, o) for n, o in self._by_long.items() if n.startswith(name)]
        if not matches:
            raise GetoptError(f"{prog}: unrecognized option '--{text}'", f"--{text}")
        distinct = {id(o) for _, o in matches}
        if len(distinct) > 1:
            names = " ".join(f"'--{n}'" for n, _ in matches)
            raise GetoptError(
                f"{prog}: option '--{text}' is ambiguous; possibilities: {names}", f"--{text}"
            )
        return matches[0][1], matches[0][0]


def getopt_long(
    argv: Sequence[str],
    table: OptionTable,
    prog: str,
    *,
    stop_at_positional: bool = True,
) -> tuple[list[Parsed], list[str]]:
    """Parse ``argv`` (without the program name) into options and positional words."""
    out: list[Parsed] = []
    positional: list[str] = []
    i = 0
    n = len(argv)
    while i < n:
        word = argv[i]
        if word == "--":
            positional.extend(argv[i + 1 :])
            break
        if not word.startswith("-") or word == "-":
            if stop_at_positional:
                positional.extend(argv[i:])
                break
            positional.append(word)
            i += 1
            continue
        if word.startswith("--"):
            body = word[2:]
            name, eq, value = body.partition("=")
            opt, full = table.lookup_long(prog, name, body)
            if opt.arg is Arg.NONE:
                if eq:
                    raise GetoptError(
                        f"{prog}: option '--{full}' doesn't allow an argument", word
                    )
                out.append(Parsed(opt, None, f"--{full}"))
            elif opt.arg is Arg.OPTIONAL:
                out.append(Parsed(opt, value if eq else None, f"--{full}"))
            else:
                if not eq:
                    if i + 1 >= n:
                        raise GetoptError(
                            f"{prog}: option '--{full}' requires an argument", word
                        )
                    i += 1
                    value = argv[i]
                out.append(Parsed(opt, value, f"--{full}"))
            i += 1
            continue
        # cluster of short options
        j = 1
        while j < len(word):
            ch = word[j]
            sopt = table.short(ch)
            if sopt is None:
                raise GetoptError(f"{prog}: invalid option -- '{ch}'", word)
            rest = word[j + 1 :]
            if sopt.arg is Arg.NONE:
                out.append(Parsed(sopt, None, f"-{ch}"))
                j += 1
                continue
            if sopt.arg is Arg.OPTIONAL:
                out.append(Parsed(sopt, rest or None, f"-{ch}"))
                break
            if rest:
                out.append(Parsed(sopt, rest, f"-{ch}"))
                break
            if i + 1 >= n:
                raise GetoptError(f"{prog}: option requires an argument -- '{ch}'", word)
            i += 1
            out.append(Parsed(sopt, argv[i], f"-{ch}"))
            break
        i += 1
    return out, positional
