#!/bin/sh
# Installs the kernel image's packages into the root it runs in. Shared by both
# recipes so they cannot drift: the Dockerfile (online, on debian:bookworm-slim)
# and the offline build (inside a debootstrap minbase chroot). Arguments: the
# Debian packages, from bai_jupyter.image.PACKAGES.
set -eu
[ "$#" -gt 0 ] || { echo "setup.sh: no packages given" >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

# No daemon may start while packages install (openssh-server's postinst would).
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d

# Same size trims as debian:*-slim, for the offline root too.
cat >/etc/dpkg/dpkg.cfg.d/bai-slim <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
CFG
cat >/etc/apt/apt.conf.d/bai-slim <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
CFG

apt-get update
apt-get install -y --no-install-recommends "$@"
python3 -c 'import ipykernel' # fail the build, not the first session

# Host keys are per container (generated at start or provided), never baked in.
rm -f /etc/ssh/ssh_host_*
# sshd refuses to start without its privilege-separation directory.
mkdir -p /run/sshd
chmod 755 /run/sshd

# Keep it small: no apt lists, caches, logs, or docs of the base packages
# (the .pyc files stay: without them every kernel start compiles ipykernel).
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old \
    /var/lib/dpkg/*-old /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log \
    /var/cache/ldconfig/aux-cache /tmp/* /var/tmp/*
find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find /usr/share/doc -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf /usr/share/man/* /usr/share/info/* /usr/share/locale/* /usr/share/lintian/*
rm -f /usr/sbin/policy-rc.d
