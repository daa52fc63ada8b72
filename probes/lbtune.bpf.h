/* Shared by every lbtune probe: the interface filter.
 *
 * Tracepoints name the device (a __data_loc string), not its ifindex. The event's name is
 * copied into two 64-bit words (bytes after the name zeroed) and hashed with a perfect hash
 * lbtune chose for this run's interface names (LBT_IF_H1, LBT_IF_H2: no two wanted names
 * share a slot). One array lookup and one comparison of the two words then say whether the
 * device is wanted, whatever the number of interfaces: no string comparison per interface
 * and no hash-map call. The name copy (bpf_probe_read_kernel) is the only helper call, and
 * names of a length no wanted name has are turned away before it.
 *
 * Only tracepoint arguments are read: the record layout structs (struct lbt_args_*) are
 * generated from the running kernel's tracefs format files, never from kernel headers.
 */
#define LBT_IFNAMSIZ 16

struct lbt_ifslot {
	u64 w0, w1; /* the device name, NUL-padded to 16 bytes, as two little-endian words */
	u32 base;   /* first slot of this interface in the per-queue arrays */
	u16 nrx;    /* rx queues counted by the probe (0: counters win, not probed) */
	u16 ntx;    /* tx queues counted by the probe (0: counters win, not probed) */
	u16 rx_off; /* queue_mapping - rx_off = rx queue (1 where drivers record queue + 1) */
	u16 id;     /* the interface's number in lbtune's list; 0: an empty slot */
	u32 idx;    /* this slot's own index */
};

BPF_ARRAY(lbt_ifaces, struct lbt_ifslot, LBT_IF_SLOTS);

static __always_inline u32 lbt_name_slot(u64 w0, u64 w1)
{
	return ((w0 ^ (w1 * LBT_IF_H2)) * LBT_IF_H1) >> LBT_IF_SHIFT;
}

/* The filter entry of the device named by a __data_loc field, or NULL. */
static __always_inline struct lbt_ifslot *lbt_iface(void *args, u32 data_loc)
{
	u64 w[2] = {};
	u32 len = data_loc >> 16; /* bytes, the terminating NUL included */
	u32 slot;
	struct lbt_ifslot *s;

	/* LBT_IF_LENS has bit n set when a wanted name is n bytes long with its NUL: other
	 * devices are turned away before the name is copied. */
	if (len < 2 || len > LBT_IFNAMSIZ || !((LBT_IF_LENS >> len) & 1))
		return NULL;
	if (bpf_probe_read_kernel(w, sizeof(w), (char *)args + (data_loc & 0xFFFF)))
		return NULL;
	len -= 1;
	if (len < 8) {
		w[0] &= (1ULL << (len * 8)) - 1;
		w[1] = 0;
	} else if (len == 8) {
		w[1] = 0;
	} else {
		w[1] &= (1ULL << ((len - 8) * 8)) - 1; /* len <= 15 */
	}
	slot = lbt_name_slot(w[0], w[1]);
	s = lbt_ifaces.lookup(&slot);
	if (!s || !s->id || s->w0 != w[0] || s->w1 != w[1])
		return NULL;
	return s;
}
