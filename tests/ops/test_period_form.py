"""Report periods and the portal form, parsed without a cluster."""

from __future__ import annotations

import time

import pytest

from corral.frontends.errors import SubmitError
from corral.ops.period import parse_when, period
from corral.web.submit import form_argv, form_submission

NOW = 1_700_000_000.0


def test_parse_when_forms() -> None:
    assert parse_when("now", NOW) == NOW
    assert parse_when("7d", NOW) == NOW - 7 * 86400
    assert parse_when("-24h", NOW) == NOW - 86400
    assert parse_when("now-90m", NOW) == NOW - 5400
    assert parse_when("2w", NOW) == NOW - 14 * 86400
    assert parse_when("1714561200", NOW) == 1714561200.0
    assert parse_when("2024-05-01", NOW) == time.mktime(time.strptime("2024-05-01", "%Y-%m-%d"))
    assert parse_when("2024-05-01T13:00", NOW) == parse_when("2024-05-01 13:00:00", NOW)
    with pytest.raises(ValueError, match="cannot read the time 'yesterday'"):
        parse_when("yesterday", NOW)


def test_period_defaults_and_empty() -> None:
    assert period(None, None, NOW) == (NOW - 86400, NOW)
    assert period("1h", None, NOW) == (NOW - 3600, NOW)
    with pytest.raises(ValueError, match="the period is empty"):
        period("1h", "2h", NOW)


def test_form_becomes_sbatch_flags_that_override_the_script() -> None:
    form = {"script": "#!/bin/bash\n#SBATCH -c 4\n#SBATCH -J fromscript\nhostname\n",
            "name": "fromform", "cpus": "2", "mem": "1G", "time": "10:00", "gpus": "",
            "workdir": "/tmp"}
    assert form_argv(form) == ["--job-name=fromform", "--cpus-per-task=2", "--mem=1G",
                               "--time=10:00"]
    sub = form_submission(form, "root", 0, 0, now=NOW)
    assert sub.spec.name == "fromform" and sub.spec.cpus_per_task == 2
    assert sub.spec.mem_per_node_mb == 1024 and sub.spec.time_limit_s == 600
    assert sub.workdir == "/tmp" and sub.env["USER"] == "root" and sub.dialect == "slurm"
    assert sub.script is not None and sub.script.startswith("#!/bin/bash")
    assert sub.extra["submitted_via"] == "web"


def test_bad_forms_get_sbatch_errors() -> None:
    with pytest.raises(SubmitError, match="Batch script is empty"):
        form_submission({"script": None}, "root", 0, 0)
    with pytest.raises(SubmitError, match="does not look like a batch script"):
        form_submission({"script": "hostname\n"}, "root", 0, 0)
    with pytest.raises(SubmitError, match="absolute path"):
        form_submission({"script": "#!/bin/sh\n", "workdir": "rel/dir"}, "root", 0, 0)
    with pytest.raises(SubmitError, match="invalid value for --job-name"):
        form_submission({"script": "#!/bin/sh\n", "name": "a\nb"}, "root", 0, 0)
    with pytest.raises(SubmitError, match="--time"):
        form_submission({"script": "#!/bin/sh\n", "time": "soon"}, "root", 0, 0)
    with pytest.raises(SubmitError, match="larger than"):
        form_submission({"script": "#!/bin/sh\n" + "x" * (1 << 20)}, "root", 0, 0)
