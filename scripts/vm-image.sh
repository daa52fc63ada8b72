#!/usr/bin/env bash
# The VM lab's boot files (lbtune.lab.guests.vm): Debian's own kernel, its modules and a busybox
# initramfs, prepared in a cache directory. Idempotent: a second run checks a stamp and exits.
# Nothing is installed on the host: the kernel package is fetched with `apt-get download` and
# unpacked with `dpkg-deb -x` into the cache; the host's kernels and boot config are untouched.
#
#   scripts/vm-image.sh [CACHE_DIR]     (default: $LBTUNE_VM_CACHE or /var/cache/lbtune/vm)
#
# Result, under CACHE_DIR/<version>/: vmlinuz, initrd.img, root/lib/modules/<version> (the whole
# module tree, depmod'ed; the guest bind-mounts it over /lib/modules/<version> so `modprobe`
# works there) and ready (the stamp). CACHE_DIR/current names the version.
#
# The version is pinned to the newest linux-headers-<version> that set-up installs, so bcc in the
# guest compiles against headers matching the running kernel.
set -euo pipefail

CACHE=${1:-${LBTUNE_VM_CACHE:-/var/cache/lbtune/vm}}
# Loaded by the initramfs at boot, in this order (virtio_net before e1000e: eth0 is virtio).
BOOT_MODS=(virtio_pci virtio_blk virtio_net e1000e 9p 9pnet_virtio overlay ext4)
# Must resolve (with their dependencies) in the module tree; loaded on demand in the guest,
# never at boot (the IPVS tests load ip_vs themselves).
LAB_MODS=(veth bridge ip_vs ip_vs_rr ip_vs_wrr ip_vs_lc ip_vs_wlc ip_vs_lblc ip_vs_lblcr ip_vs_dh
          ip_vs_sh ip_vs_sed ip_vs_nq ip_vs_fo ip_vs_ovf ip_vs_mh nf_conntrack
          nf_tables nft_ct act_ct nf_nat sch_fq sch_fq_codel sch_htb sch_netem sch_tbf sch_prio
          sch_ingress sch_sfq libcrc32c)  # sch_mq is built in

say() { printf '[vm-image] %s\n' "$*"; }
die() { printf 'vm-image: %s\n' "$*" >&2; exit 1; }

hdr=$(find /usr/src -maxdepth 1 -name 'linux-headers-*-amd64' -printf '%f\n' | sort -V | tail -n 1)
[ -n "$hdr" ] || die "no /usr/src/linux-headers-*-amd64 (install linux-headers-amd64 first)"
VER=${hdr#linux-headers-}
DIR="$CACHE/$VER"
# bcc in the guest compiles against /lib/modules/$VER/build (and source), which the guest sees
# through the module tree's bind mount: point them at the headers on the host's read-only /.
link_headers() {
  ln -sfn "/usr/src/linux-headers-$VER" "$1/lib/modules/$VER/build"
  common=$(find /usr/src -maxdepth 1 -name "linux-headers-${VER%-*}-common" -printf '%p\n' | head -n 1)
  [ -z "$common" ] || ln -sfn "$common" "$1/lib/modules/$VER/source"
}
if [ -f "$DIR/ready" ] && [ -f "$DIR/vmlinuz" ] && [ -f "$DIR/initrd.img" ]; then
  [ -L "$DIR/root/lib/modules/$VER/build" ] || link_headers "$DIR/root"
  say "kernel $VER ready in $DIR"
  exit 0
fi
for tool in apt-get dpkg-deb depmod modprobe busybox; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
[ -x /bin/busybox ] || die "/bin/busybox missing (install busybox-static)"

mkdir -p "$DIR"
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

deb=$(find "$DIR" -maxdepth 1 -name "linux-image-${VER}_*.deb" | head -n 1)
if [ -z "$deb" ]; then
  say "downloading linux-image-$VER"
  # apt-get download writes into the current directory; _apt needs to be able to write it.
  (cd "$tmp" && chmod 777 . && apt-get download -q "linux-image-$VER") \
    || die "apt-get download linux-image-$VER failed"
  mv "$tmp"/linux-image-"${VER}"_*.deb "$DIR/"
  deb=$(find "$DIR" -maxdepth 1 -name "linux-image-${VER}_*.deb" | head -n 1)
fi

say "unpacking $(basename "$deb")"
rm -rf "$DIR/root"
dpkg-deb -x "$deb" "$tmp/root"
depmod -b "$tmp/root" "$VER"

# The module closure: every module the boot or the lab needs must resolve in this tree.
closure() {
  modprobe -d "$tmp/root" -S "$VER" --show-depends "$1" 2>"$tmp/err" \
    || die "module $1 not found for $VER: $(cat "$tmp/err")"
}
for m in "${LAB_MODS[@]}"; do closure "$m" >/dev/null; done

say "building the initramfs"
ird="$tmp/initramfs"
mkdir -p "$ird"/{bin,dev,proc,sys,mnt/work,mnt/lower,mnt/upper,newroot,modules}
cp /bin/busybox "$ird/bin/busybox"
ln -s busybox "$ird/bin/sh"
: > "$ird/modules/order"
for m in "${BOOT_MODS[@]}"; do
  closure "$m" | while read -r kind path _; do
    [ "$kind" = insmod ] || continue  # "builtin NAME": nothing to load
    name=$(basename "$path")
    grep -qx "$name" "$ird/modules/order" && continue
    cp "$path" "$ird/modules/$name"
    echo "$name" >> "$ird/modules/order"
  done
done
# The init stays generic: everything per-run is in stage1.sh on the run's work share
# (9p tag "work"), written by lbtune.lab.guests.vm.
cat > "$ird/init" <<'EOF'
#!/bin/sh
export PATH=/bin
busybox mount -t proc proc /proc
busybox mount -t sysfs sys /sys
busybox mount -t devtmpfs dev /dev
for m in $(busybox cat /modules/order); do
  busybox insmod "/modules/$m" || echo "lbtune-vm: insmod $m failed"
done
if ! busybox mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 work /mnt/work; then
  echo "lbtune-vm: cannot mount the work share"; busybox poweroff -f
fi
exec busybox sh /mnt/work/stage1.sh
EOF
chmod 755 "$ird/init"
for a in $(busybox --list); do [ -e "$ird/bin/$a" ] || ln -s busybox "$ird/bin/$a"; done
(cd "$ird" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 > "$tmp/initrd.img")

link_headers "$tmp/root"
cp "$tmp/root/boot/vmlinuz-$VER" "$tmp/vmlinuz"
mv "$tmp/root" "$DIR/root"
mv "$tmp/vmlinuz" "$tmp/initrd.img" "$DIR/"
echo "$VER" > "$DIR/ready"
echo "$VER" > "$CACHE/current"
say "kernel $VER ready in $DIR"
