"""Versioned controller <-> agent messages (encode/decode only, no I/O).

Transport: one WebSocket per agent at ``/api/v1/agent`` (the agent connects out to the
controller; ``Authorization: Bearer <cluster key>``). Every frame is a JSON object
``{"v": PROTOCOL_VERSION, "msgs": [msg, ...]}``: messages are batched, each is a dict with
a ``"t"`` (type) key. Both sides process the messages of a frame in order.

Agent -> controller:

- ``hello``     ``node`` (NodeSpec JSON), ``running`` [{job_id, restarts}], ``exits``
                [JobExit JSON], ``agent_version``, ``boot_time``, ``pid``, ``hostname``.
                First frame.
- ``heartbeat`` ``running`` [{job_id, restarts}] (the supervisors alive now), optional
                ``usage`` [{job_id, cpu_time_s, rss_mb, pids}] (live samples, sstat)
- ``exit``      ``exit`` (JobExit JSON; ``exit.restarts`` says which run)
- ``launched``  ``job_id``, ``restarts``: the supervisor is started
- ``launch_failed`` ``job_id``, ``restarts``, ``message``: could not start it at all

Controller -> agent:

- ``welcome``   ``node`` (the name the controller knows it by), ``heartbeat_s``,
                ``kill_grace_s``, ``cluster``
- ``launch``    ``req`` (LaunchRequest JSON); idempotent by (job_id, restarts)
- ``cancel``    ``job_id``, ``restarts``, ``grace_s``
- ``signal``    ``job_id``, ``signal`` (name or number), ``batch_only``
- ``time_limit`` ``job_id``, ``time_limit_s``
- ``ack``       ``job_id``, ``restarts``: the exit is persisted, forget it
- ``reject``    ``message``: registration refused (the agent logs it and retries later)
"""

from corral.protocol.messages import (
    PROTOCOL_VERSION,
    ProtocolError,
    decode_frame,
    encode_frame,
    node_spec_from_json,
    node_spec_to_json,
)

__all__ = [
    "PROTOCOL_VERSION", "ProtocolError", "decode_frame", "encode_frame",
    "node_spec_from_json", "node_spec_to_json",
]
