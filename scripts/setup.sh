#!/usr/bin/env bash
# Idempotent set-up for a Debian 12 machine (as root): apt packages, kernel headers link for
# bcc, the project venv (sees the distro's bcc), and lbtune installed in it with test extras.
# Every step checks before it acts, so a second run changes nothing and takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the HTML report is checked in a real headless browser (tests/browser.py).
PKGS=(python3 python3-venv python3-bpfcc bpfcc-tools iproute2 ethtool ipvsadm kmod
      user-mode-linux tmux linux-headers-amd64 procps gcc libc6-dev nftables bpftool chromium
      man-db  # man-db (with groff-base): the generated man pages are rendered and linted
      lintian python3-psutil)  # `make deb` is linted; the package's own dependency (docs/install.md)
# The VM lab (lbtune.lab.guests.vm): qemu boots Debian's kernel; busybox-static builds its initramfs.
VM_PKGS=(qemu-system-x86 busybox-static)
# The lab's servers and load (run only inside the UML guest, never as host services);
# irqbalance runs only inside the VM lab guest, started by its test (tests/vm/test_vm_irqbalance.py).
# Set-up never stops or disables a service that was there before it ran: a policy-rc.d keeps
# the install from starting anything, and scripts/setup-services.sh gives units the install
# itself enabled their previous boot state (docs/testing.md, "Set-up and the host's services").
# bird2: the BGP/BFD speaker of a director cluster; its exported config is parse-checked with
# `bird -p` (tests/unit/ipvs/test_bird_export.py) and the health gate drives a bird run by
# hand in a namespace (tests/netns/test_ipvs_gate_netns.py), never the host's bird.service.
LAB_PKGS=(nginx-light haproxy wrk apache2-utils keepalived irqbalance bird2)
# The fleet tests run Prometheus (and promtool, which also lints the agent's /metrics) by hand
# in a namespace; the exporter bench runs node_exporter by hand on a loopback port. Neither
# runs as a service of this host: the same policy-rc.d and setup-services.sh handle them.
# systemd-container: systemd-nspawn boots the throwaway system the collection's deploy role is
# tested against (tests/fleet/nspawn.py: this host's root under a volatile overlay, in its own
# mount namespace); its postinst enables machines.target, given back its boot state the same way.
FLEET_PKGS=(prometheus prometheus-node-exporter systemd-container)
export LBTUNE_LAB_UNITS="nginx haproxy keepalived irqbalance bird prometheus prometheus-node-exporter machines.target"
VENV=.venv

say() { printf '[setup] %s\n' "$*"; }

missing=()
for p in "${PKGS[@]}" "${VM_PKGS[@]}" "${LAB_PKGS[@]}" "${FLEET_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: packages missing (${missing[*]}); run as root to install them" >&2
    exit 3
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Package scripts must not start nginx, haproxy, keepalived or bird on this (shared, CI) host:
  # a policy-rc.d that refuses every start, only for this install, unless one exists already.
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# lbtune setup: no service starts during package installation\nexit 101\n' \
      > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  units_state=$(mktemp)
  trap 'rm -f "$units_state"; if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi' EXIT
  bash scripts/setup-services.sh before "$units_state"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  bash scripts/setup-services.sh after "$units_state"
else
  say "apt packages present"
fi

# bcc compiles probes against /lib/modules/$(uname -r)/{build,source}. When the running kernel
# has no headers package (a cloud or custom kernel), link Debian's newest amd64 headers: the
# probes read tracepoint arguments only, so another kernel's headers are enough.
rel=$(uname -r)
if [ ! -e "/lib/modules/$rel/build" ]; then
  hdr=$(find /usr/src -maxdepth 1 -name 'linux-headers-*-amd64' | sort -V | tail -n 1)
  if [ -n "$hdr" ] && [ "$(id -u)" -eq 0 ]; then
    common=${hdr%-amd64}-common
    mkdir -p "/lib/modules/$rel"
    ln -sfn "$hdr" "/lib/modules/$rel/build"
    [ -d "$common" ] && ln -sfn "$common" "/lib/modules/$rel/source"
    say "linked /lib/modules/$rel/build -> $hdr"
  else
    say "warning: no kernel headers for $rel; probes will be unavailable"
  fi
else
  say "kernel headers present for $rel"
fi

# The VM lab's kernel, modules and initramfs, cached (scripts/vm-image.sh; never installed on
# the host). Needs root for the cache under /var/cache unless LBTUNE_VM_CACHE points elsewhere.
if [ "$(id -u)" -eq 0 ] || [ -n "${LBTUNE_VM_CACHE:-}" ]; then
  bash scripts/vm-image.sh
else
  say "warning: not root: the VM lab image is not prepared (run scripts/vm-image.sh as root)"
fi

# The venv must be built from the distro's Python so that `import bcc` works in it.
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import bcc' 2>/dev/null; then
  say "creating $VENV from /usr/bin/python3 with system site packages"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
stamp="$VENV/.lbtune-installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  say "installing lbtune (editable) with test, lint, tui and exporter extras"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[test,lint,tui,exporter]' 'tox>=4.11'
  rm -f "$VENV"/.lbtune-installed-*
  touch "$stamp"
else
  say "venv up to date"
fi
# The wheels `make wheel` and `make deb` build from offline (fetched once, then kept).
PYTHON="$VENV/bin/python" bash scripts/wheelhouse.sh
"$VENV/bin/python" -c 'import bcc, lbtune; print("[setup] ok: lbtune", lbtune.__version__, "with bcc")'
