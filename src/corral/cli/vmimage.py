"""``corral image build-vm``: build the default VM guest (``corral.vmimage.build``) into the
node's image cache (``[vm] image_dir``), offline from installed Debian packages."""

from __future__ import annotations

import os

import typer

image_app = typer.Typer(help="VM images for VM jobs (docs/vms.md).", no_args_is_help=True)


@image_app.command("build-vm")
def build_vm(
    name: str = typer.Option("default", "--name", help="image name (jobs: --vm=NAME)"),
    image_dir: str = typer.Option(None, "--dir", help="image cache (default: [vm] image_dir)"),
    kernel: str = typer.Option(None, "--kernel", help="kernel (default: newest /boot/vmlinuz-*)"),
    busybox: str = typer.Option(None, "--busybox", help="static busybox (default: /bin/busybox)"),
    config: str = typer.Option(None, "--config", "-c", envvar="CORRAL_CONFIG",
                               help="corral.toml to read [vm] image_dir from"),
    as_json: bool = typer.Option(False, "--json", help="print the manifest as JSON"),
) -> None:
    """Build a guest: the host's Debian kernel and a busybox initramfs with Corral's init."""
    from dataclasses import asdict

    from corral.cli.output import fail, note, print_json
    from corral.vmimage.build import BuildError, build_vm_image
    from corral.vmimage.manifest import ImageError, check_name

    try:
        if name.startswith("/"):
            raise ImageError(f"an image name, not a path: {name!r}")
        check_name(name)
    except ImageError as exc:
        fail(str(exc), 2, prog="corral image build-vm")
    directory = image_dir
    if directory is None:
        from corral.config import ConfigError, load_config
        from corral.vmimage.settings import VmConfig

        try:
            directory = load_config(config).vm.image_dir if config else VmConfig().image_dir
        except (ConfigError, OSError) as exc:
            fail(str(exc), 2, prog="corral image build-vm")
    target = os.path.join(directory, name)
    try:
        man = build_vm_image(target, kernel=kernel, busybox=busybox, name=name)
    except (BuildError, OSError) as exc:
        fail(str(exc), 1, prog="corral image build-vm")
    if as_json:
        print_json({"path": target, **asdict(man)})
        return
    note(f"built VM image {name!r} in {target}: kernel {man.kernel_version}, "
         f"{len(man.modules)} modules")


def register(app: typer.Typer) -> None:
    """``corral image build-vm`` joins the one ``corral image`` group (``image pull`` is
    ``corral.cli.images``'s): two groups of one name would hide each other."""
    from corral.cli import images

    images.image_app.registered_commands.extend(image_app.registered_commands)
