"""Queue passes: order (``order``), the pass loop (``schedule``), reservations (``plan``),
preemption glue (``preemption``) and their shared state (``state``)."""
