"""Slurm and PBS commands (``sbatch`` ... ``qdel``) as thin front ends over Corral.

Two halves:

- a *lean launcher* (``corral.shims.lean``) that each installed command runs. It imports
  only ``os``, ``_socket`` and ``_json``, sends the command line, working directory and
  environment to the controller's shim endpoint over its Unix socket, and prints what
  comes back. Files the command needs (the batch script, stdin) are read by the launcher,
  as the calling user, only when the controller asks for them.
- the commands themselves (``corral.shims.sbatch`` ...), pure functions of a ``Context``
  and a ``Client``; the controller runs them in-process (``corral.shims.server``), so a
  call costs one interpreter start plus a round trip. Where the controller has no shim
  endpoint, the launcher runs the same functions locally over the REST client
  (``corral.shims.local``). ``srun`` and ``salloc`` always run locally: they start and
  supervise processes on this node.

Keep this package's ``__init__`` free of imports: the launcher imports through it.
"""
