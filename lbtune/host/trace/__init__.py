"""What the eBPF probes need from the kernel: the bcc loader, BTF, kallsyms, tracefs."""
