"""The default guest's ``/init`` (a busybox shell script) and the host side of its contract.

The contract between the agent's VM launcher (``corral.agent.vm.launcher``) and a guest —
any guest: the default initramfs runs this script, an image from elsewhere must run an
init that honours the same rules (``docs/vms.md``):

* **Control share**: a 9p share with mount tag ``corral`` (virtio-9p) holding
  ``job`` (the batch script, executable, or absent), ``run`` (a shell fragment that
  sets ``WORKDIR`` and ``set -- ARGS``: what to execute), ``env`` (``export NAME='value'``
  lines: the job's environment), ``user`` (``name uid gid home group...``: who runs it).
  The guest writes ``rc`` there: the job's exit status as decimal text (``128 + N``
  when signal N ended it), written before it powers off.
* **Working directory**: a 9p share with tag ``work`` mounted at ``$WORKDIR`` (the same
  path as on the host), so relative paths in the job mean what they mean on the host.
* **Output**: virtio serial ports named ``corral.out`` and ``corral.err`` carry the
  job's stdout and stderr to its output files; ``corral.ctl`` brings signals from the
  host: one line per signal, its number (``15`` for SIGTERM); the guest sends it to the
  job's process group.
* **Power**: when the job ends the guest powers off (``poweroff -f``); on an ACPI power
  button press (``system_powerdown``) it should do the same after stopping the job. The
  host kills the VM after the job's kill grace when the guest does not stop.
* The job runs as ``uid``/``gid`` with the supplementary groups given (root in the guest
  only for a job root submitted; qemu itself always runs as the job's user).

Kernel command line: ``quiet`` unless debugging; the launcher adds ``corral.hostname=``.
"""

from __future__ import annotations

SHARE_TAG = "corral"
WORK_TAG = "work"
PORT_OUT = "corral.out"
PORT_ERR = "corral.err"
PORT_CTL = "corral.ctl"

# 9p mount options: the 9P2000.L dialect, a large message size (fewer round trips)
MOUNT_9P = "trans=virtio,version=9p2000.L,msize=524288,cache=mmap"

INIT = r"""#!/bin/busybox sh
# Corral's default guest init (corral.vmimage.guestinit): mount the shares, run the job
# as its user, hand back the exit status, power off.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=1777 shm /dev/shm
fail() { echo "corral-init: $*" >/dev/ttyS0; poweroff -f; }
while read -r mod; do
    [ -n "$mod" ] && insmod "/lib/modules/$mod" 2>/dev/null
done < /etc/corral/modules
mkdir -p /corral
mount -t 9p -o @MOUNT@ @SHARE@ /corral || fail "cannot mount the control share"
host=localhost
root=
for word in $(cat /proc/cmdline); do
    case "$word" in
        corral.hostname=*) host="${word#corral.hostname=}";;
        corral.root=*) root="${word#corral.root=}";;
    esac
done
hostname "$host"
port() {
    for p in /sys/class/virtio-ports/*; do
        [ "$(cat "$p/name" 2>/dev/null)" = "$1" ] && { echo "/dev/${p##*/}"; return; }
    done
    echo /dev/null
}
OUT=$(port @OUT@); ERR=$(port @ERR@); CTL=$(port @CTL@)
read -r name uid gid home groups < /corral/user || fail "no user record"
echo "root:x:0:0:root:/root:/bin/sh" > /etc/passwd
[ "$uid" = 0 ] && name=root || echo "$name:x:$uid:$gid::$home:/bin/sh" >> /etc/passwd
echo "root:x:0:" > /etc/group
for g in $gid $groups; do
    grep -q ":x:$g:" /etc/group || echo "g$g:x:$g:$name" >> /etc/group
done
. /corral/run
chroot=
if [ -n "$root" ]; then  # an image's disk is the job's root file system
    mkdir -p /newroot
    mount "$root" /newroot || fail "cannot mount the image's root file system $root"
    for d in proc sys dev tmp corral .corral-bb; do mkdir -p "/newroot/$d"; done
    mount --bind /proc /newroot/proc; mount --bind /sys /newroot/sys
    mount --bind /dev /newroot/dev; mount -t tmpfs -o mode=1777 tmp /newroot/tmp
    mount --bind /corral /newroot/corral
    mount -t tmpfs bb /newroot/.corral-bb
    cp /bin/busybox /newroot/.corral-bb/busybox && ln -s busybox /newroot/.corral-bb/sh
    grep -q "^[^:]*:[^:]*:$uid:" /newroot/etc/passwd 2>/dev/null \
        || echo "$name:x:$uid:$gid::$home:/bin/sh" >> /newroot/etc/passwd
    grep -q "^$name:" /newroot/etc/passwd \
        || name=$(awk -F: -v u="$uid" '$3 == u {print $1; exit}' /newroot/etc/passwd)
    for g in $gid $groups; do
        grep -q "^[^:]*:[^:]*:$g:" /newroot/etc/group 2>/dev/null \
            || echo "g$g:x:$g:$name" >> /newroot/etc/group
    done
    chroot="chroot /newroot /.corral-bb/busybox"
    mkdir -p "/newroot$WORKDIR"
    mount -t 9p -o @MOUNT@ @WORK@ "/newroot$WORKDIR" || fail "cannot mount the working directory"
    sh=/.corral-bb/sh
else
    mkdir -p "$WORKDIR"
    mount -t 9p -o @MOUNT@ @WORK@ "$WORKDIR" || fail "cannot mount the working directory"
    chown "$uid:$gid" /tmp /dev/shm 2>/dev/null; chmod 1777 /tmp /dev/shm
    sh=/bin/sh
fi
setsid $chroot su -p -s $sh "$name" -c '. /corral/env; cd "$0" || exit 1; exec "$@"' \
    "$WORKDIR" "$@" < /dev/null > "$OUT" 2> "$ERR" &
job=$!
if [ -e "$CTL" ]; then
    ( while read -r sig; do
          case "$sig" in *[!0-9]*|"") continue;; esac
          kill "-$sig" "-$job" 2>/dev/null || kill "-$sig" "$job" 2>/dev/null
      done < "$CTL" ) &
fi
wait "$job"
rc=$?
echo "$rc" > /corral/rc.tmp && mv /corral/rc.tmp /corral/rc
sync
poweroff -f
"""


def init_script() -> str:
    return (INIT.replace("@MOUNT@", MOUNT_9P).replace("@SHARE@", SHARE_TAG)
            .replace("@WORK@", WORK_TAG).replace("@OUT@", PORT_OUT)
            .replace("@ERR@", PORT_ERR).replace("@CTL@", PORT_CTL))


def shell_quote(text: str) -> str:
    """``text`` as one single-quoted shell word (NUL bytes are refused)."""
    if "\0" in text:
        raise ValueError("a NUL byte cannot pass through the shell")
    return "'" + text.replace("'", "'\\''") + "'"
