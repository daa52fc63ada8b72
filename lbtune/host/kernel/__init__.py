"""The kernel's CPU, IRQ and boot state.

CPU topology and lists, the command line, interrupts and their names, irqbalance, sysctls,
the bootloader, the clock's sync state, and what the machine can do for lbtune.
"""
