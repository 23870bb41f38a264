"""Front ends: parse the Slurm and PBS dialects (flags and script directives) to one
``JobSubmission``.

- ``getopt``: a GNU ``getopt_long`` work-alike (abbreviations, ``--opt=value``, clustered
  short flags) with glibc's exact error wording, so shims fail like the real commands.
- ``directives``: ``#SBATCH`` / ``#PBS`` line extraction with Slurm's tokenizer rules.
- ``slurm_options``: ``sbatch``/``srun``/``salloc`` option tables and their semantics.
- ``pbs_options``: ``qsub`` flags, ``#PBS`` directives and ``-l`` resource lists.

Everything here is pure apart from reading the files a caller names; the caller supplies
the current time, working directory, environment and identity.
"""

from corral.frontends.errors import SubmitError

__all__ = ["SubmitError"]
