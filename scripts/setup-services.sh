#!/usr/bin/env bash
# The service side of scripts/setup.sh: the lab's packages (nginx, haproxy, keepalived) must
# never start as services of this host (nor systemd-container's machines.target be enabled at
# boot), and set-up must never stop or disable a service that was there before it ran.
#
#   setup-services.sh before STATE   record each lab unit's boot state before the install
#   setup-services.sh after STATE    after the install: give back the boot state of units
#                                    the install itself enabled; touch nothing else
#
# Starting is prevented by the policy-rc.d that setup.sh puts in place for the install (the
# packages' scripts then start nothing). What a package's postinst still does is *enable*
# its unit (deb-systemd-helper enable): a unit that was absent or disabled before the
# install would start at the next boot (nginx taking port 80 from haproxy on a web node).
# `after` returns such a unit to "not enabled", which is the state it had before; a unit
# that was enabled before is left as it is, running or not. Nothing is ever stopped.
#
# SYSTEMCTL names the systemctl to call (tests use a fake one that records its calls).
set -euo pipefail

SYSTEMCTL=${SYSTEMCTL:-systemctl}
LAB_UNITS=(${LBTUNE_LAB_UNITS:-nginx haproxy keepalived})

say() { printf '[setup] %s\n' "$*"; }

# A name without a suffix is a service (nginx -> nginx.service); machines.target stays itself.
unit_file() {
  case "$1" in
    *.*) printf '%s\n' "$1" ;;
    *) printf '%s.service\n' "$1" ;;
  esac
}

# One word: enabled, disabled, static, masked, not-found, ... (is-enabled prints it and
# exits non-zero for everything but enabled; an unknown unit prints nothing on old systemd).
boot_state() {
  local out
  out=$("$SYSTEMCTL" is-enabled "$(unit_file "$1")" 2>/dev/null) || true
  printf '%s\n' "${out:-not-found}" | head -n 1
}

usage() { echo "usage: setup-services.sh before|after STATE" >&2; exit 2; }

[ $# -eq 2 ] || usage
step=$1 state=$2
if ! command -v "$SYSTEMCTL" >/dev/null 2>&1; then
  exit 0  # no systemd: nothing enables units at boot
fi
case "$step" in
  before)
    : > "$state"
    for unit in "${LAB_UNITS[@]}"; do
      printf '%s %s\n' "$unit" "$(boot_state "$unit")" >> "$state"
    done
    ;;
  after)
    [ -f "$state" ] || { echo "setup-services: no state file $state" >&2; exit 2; }
    while read -r unit was; do
      now=$(boot_state "$unit")
      case "$was" in
        enabled|enabled-runtime|static|indirect|generated|alias|linked|linked-runtime|masked|masked-runtime)
          continue ;;  # there before the install: left exactly as it was
      esac
      if [ "$now" = enabled ]; then
        # The install enabled a unit that was $was: give it back its boot state.
        "$SYSTEMCTL" disable --quiet "$(unit_file "$unit")"
        say "$unit: installed for the lab, not started, not enabled at boot (was $was)"
      fi
    done < "$state"
    ;;
  *) usage ;;
esac
