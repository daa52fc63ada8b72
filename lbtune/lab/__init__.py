"""The embedded lab: kernels we may change freely, run as guests of the host, for both backends.

The development machines' kernel has no IPVS and no loadable modules, so everything that needs
a kernel we can change (IPVS DR end to end, global sysctls, real-server ARP behaviour, queues,
IRQs, NUMA) runs in a lab guest: Debian's User-Mode-Linux kernel as an ordinary process
(``guests/uml.py``), or Debian's own kernel under qemu (``guests/vm.py``). Layers, top down
(an import-linter contract keeps them): ``launch`` (the lab that is up, else a fresh guest);
``experiments`` (guest-side scenario, failover, adaptive) beside ``guests`` (host side: the
``Guest`` interface, its backends, the lab kept up); ``inguest`` (what runs inside a guest:
the agent, the namespace door, the lab network, servers, load); ``progress``; ``protocol``
(the one host-to-guest request protocol and the lab's errors). See docs/architecture.md,
"The lab", and docs/lab.md.
"""
