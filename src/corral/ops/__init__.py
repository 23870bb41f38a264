"""Operations: accounting reports, efficiency, SWF export, Prometheus collectors, "why pending".

- ``jobs``: ``AcctJob``, the accounting view of a job record (``corral.client`` shape);
- ``accounting``: cluster utilization, usage by user/account, top users, time series;
- ``efficiency``: ``seff``-like CPU and memory efficiency of a job;
- ``swf_export``: finished jobs as an SWF trace for ``corral sim``;
- ``fairshare``: ``sshare``-like rows per account and user;
- ``why``: ``explain_pending``, a pending job in plain words (CLI and web);
- ``collector``: the controller's Prometheus collector (in-memory state at scrape time);
- ``agent_metrics``: the node agent's collector (node, GPUs via NVML, per-job usage);
- ``plots``: matplotlib pictures of the reports.

Nothing here imports the controller: the collectors read a controller object given to
them, the reports work on plain job records.
"""
