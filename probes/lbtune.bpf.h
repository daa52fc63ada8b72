/* Shared by every lbtune probe: the interface filter.
 *
 * Tracepoints name the device (a __data_loc string), not its ifindex. The event's name is
 * copied into two 64-bit words (bytes after the name zeroed) and hashed with a perfect hash
 * lbtune chose for this run's interface names (LBT_IF_H1, LBT_IF_H2: no two wanted names
 * share a slot). One array lookup and one comparison of the two words then say whether the
 * device is wanted, whatever the number of interfaces: no string comparison per interface
 * and no hash-map call. The name copy (bpf_probe_read_kernel) is the only helper call, and
 * names of a length no wanted name has are turned away before it. Where the device's
 * struct is at hand (tp_btf), its name is read in place instead: no copy, no helper.
 *
 * Programs on tracepoint records read only the records: their layout structs (struct
 * lbt_args_*) are generated from the running kernel's tracefs format files, never from
 * kernel headers. Programs on BTF-typed tracepoints (tp_btf: the queues probe's rx
 * entries, where the kernel has BTF) read the device's name in place (lbt_iface_dev), at
 * an offset from the running kernel's BTF, and the verifier checks each load against that
 * BTF: a wrong offset is refused at load, never read.
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

/* The filter entry of the device whose NUL-padded name is (w0, w1), or NULL. */
static __always_inline struct lbt_ifslot *lbt_iface_words(u64 w0, u64 w1)
{
	u32 slot = lbt_name_slot(w0, w1);
	struct lbt_ifslot *s = lbt_ifaces.lookup(&slot);

	if (!s || !s->id || s->w0 != w0 || s->w1 != w1)
		return NULL;
	return s;
}

/* The filter entry of the device named by a __data_loc field, or NULL. */
static __always_inline struct lbt_ifslot *lbt_iface(void *args, u32 data_loc)
{
	u64 w[2] = {};
	u32 len = data_loc >> 16; /* bytes, the terminating NUL included */

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
	return lbt_iface_words(w[0], w[1]);
}

/* The filter entry of the device whose struct net_device is at `dev`, read in place: for
 * programs whose arguments are BTF-typed kernel pointers (tp_btf), where the verifier
 * checks every load against the running kernel's own types (LBT_DEV_NAME is the offset of
 * net_device.name in this kernel's BTF). No helper call. The bytes after the name's NUL
 * are cut off as the tracepoints' copy cuts them (a renamed device can keep the tail of
 * its longer old name there). */
#ifdef LBT_DEV_NAME
#define LBT_ONES 0x0101010101010101ULL
#define LBT_HIGHS 0x8080808080808080ULL
static __always_inline struct lbt_ifslot *lbt_iface_dev(char *dev)
{
	u64 w0 = *(u64 *)(dev + LBT_DEV_NAME), w1 = *(u64 *)(dev + LBT_DEV_NAME + 8);
	/* the lowest set bit of z marks the first NUL byte (bit 8k + 7 for byte k) */
	u64 z = (w0 - LBT_ONES) & ~w0 & LBT_HIGHS;

	if (z) {
		w0 &= ((z & -z) >> 7) - 1;
		w1 = 0;
	} else {
		z = (w1 - LBT_ONES) & ~w1 & LBT_HIGHS;
		if (z)
			w1 &= ((z & -z) >> 7) - 1;
	}
	return lbt_iface_words(w0, w1);
}
#endif /* LBT_DEV_NAME */
