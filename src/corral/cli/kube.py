"""``corral kubeconfig``, ``corral export --volcano JOB`` and Volcano manifests for
``corral submit job.yaml`` (docs/kubernetes.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli.output import EXIT_INPUT, api_errors, connect, fail


def kubeconfig(
    ttl: Annotated[int | None, typer.Option(help="Token lifetime in seconds "
                                            "(default: [controller] token_ttl_s)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="Write it to this file (mode 0600)")
                      ] = None,
) -> None:
    """Print a kubeconfig for kubectl: the controller's HTTPS listener (/k8s), its CA and
    a token for you. Use: corral kubeconfig -o ~/.kube/corral; KUBECONFIG=~/.kube/corral
    kubectl get vcjob."""
    client = connect()
    path = "/kubeconfig" + (f"?ttl_s={ttl}" if ttl is not None else "")
    with api_errors("corral kubeconfig"):
        got: dict[str, Any] = client.request("GET", path)
    if got.get("warning"):
        typer.echo(f"corral kubeconfig: warning: {got['warning']}", err=True)
    if output is None:
        typer.echo(got["kubeconfig"], nl=False)
        return
    import os

    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(got["kubeconfig"])
    typer.echo(f"wrote {output} (server {got['server']})", err=True)


def export(
    job: Annotated[str, typer.Argument(help="Job id")],
    volcano: Annotated[bool, typer.Option("--volcano", help="As a Volcano Job "
                                          "(batch.volcano.sh/v1alpha1)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of YAML")] = False,
) -> None:
    """Render a job (any job, sbatch ones too) as a Volcano Job manifest."""
    if not volcano:
        fail("say which format: --volcano (the only one so far)", EXIT_INPUT,
             prog="corral export")
    import json

    client = connect()
    with api_errors("corral export"):
        manifest = client.request("GET", f"/jobs/{job}/volcano")
    if as_json:
        typer.echo(json.dumps(manifest, indent=2))
    else:
        import yaml

        typer.echo(yaml.safe_dump(manifest, sort_keys=False), nl=False)


def is_manifest(argv: list[str]) -> Path | None:
    """``corral submit FILE.yaml`` (one argument, a YAML file of kind Job): the file."""
    if len(argv) != 1 or not argv[0].endswith((".yaml", ".yml")):
        return None
    return Path(argv[0])


def submit_manifest(path: Path) -> None:
    """Submit a Volcano Job manifest (the same checks as kubectl apply)."""
    import yaml

    prog = "corral submit"
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", EXIT_INPUT, prog=prog)
    except yaml.YAMLError as exc:
        fail(f"{path} is not valid YAML: {exc}", EXIT_INPUT, prog=prog)
    if not isinstance(doc, dict) or doc.get("kind") != "Job" or not str(
            doc.get("apiVersion", "")).startswith("batch.volcano.sh/"):
        fail(f"{path} is not a Volcano Job (apiVersion batch.volcano.sh/v1alpha1, kind Job)",
             EXIT_INPUT, prog=prog)
    client = connect()
    with api_errors(prog, changes=True):
        got = client.request("POST", "/volcano/jobs", doc)
    typer.echo(f"Submitted job {got['job_id']} (Volcano Job {got['namespace']}/{got['name']})")


def register(app: typer.Typer) -> None:
    app.command("kubeconfig")(kubeconfig)
    app.command("export")(export)
