"""The embedded lab: a User-Mode-Linux kernel run as an ordinary process.

The host kernel of the development machines has no IPVS and no loadable modules, so
everything that needs a kernel we can change freely (IPVS DR end to end, global sysctls,
real-server ARP behaviour) runs inside Debian's ``linux.uml`` with the host filesystem as a
read-only root. ``uml`` is the host-side runner, ``guest`` the entry point inside the guest,
``checks`` the guest-side functions (see DESIGN.md, "The lab kernel").
"""
