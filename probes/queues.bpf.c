/* queues: per-interface, per-queue packets, bytes and sizes from the rx entry tracepoints
 * (net:netif_receive_skb_entry, napi_gro_receive_entry, ...: one per way a driver hands a
 * packet to the stack) and net:net_dev_start_xmit.
 *
 * Per-CPU arrays with integer indexes: slot = the interface's base + queue; the last slot
 * of each interface takes packets whose queue is unknown or out of range.
 *
 * rx filter shortcut: a packet received in a NAPI poll carries its NAPI instance's id,
 * which is unique on the host and belongs to one device. lbt_q_napi_ids remembers, per id,
 * which filter slot (or none) its device matched, so only the first packet of each NAPI
 * instance pays the name copy. Ids below LBT_MIN_NAPI_ID are not NAPI ids (the same skb
 * field holds the sending CPU + 1 on paths such as veth without NAPI) and take the name.
 */
struct lbt_qval {
	u64 packets;
	u64 bytes;
	u64 sizes[LBT_Q_NSIZES]; /* skbs by length; bounds in LBT_Q_SIZE_* (lbtune's list) */
};

BPF_PERCPU_ARRAY(lbt_q_rx, struct lbt_qval, LBT_Q_SLOTS);
BPF_PERCPU_ARRAY(lbt_q_tx, struct lbt_qval, LBT_Q_SLOTS);
/* (napi_id << 32) | (filter slot + 1), 0 for "not wanted": one 64-bit word, so a reader on
 * another CPU never sees half of an update. */
BPF_ARRAY(lbt_q_napi_ids, u64, LBT_Q_NAPI_IDS);

static __always_inline u32 lbt_q_bucket(u32 len)
{
	if (len < LBT_Q_SIZE_0)
		return 0;
	if (len < LBT_Q_SIZE_1)
		return 1;
	if (len < LBT_Q_SIZE_2)
		return 2;
	if (len < LBT_Q_SIZE_3)
		return 3;
	if (len < LBT_Q_SIZE_4)
		return 4;
	return 5;
}

/* bcc cannot rewrite map calls inside macros: the shared work is in inline functions. */
static __always_inline void lbt_q_add(int tx, u32 slot, u32 len, u32 segs)
{
	struct lbt_qval *v = tx ? lbt_q_tx.lookup(&slot) : lbt_q_rx.lookup(&slot);

	if (v) {
		v->packets += segs;
		v->bytes += len;
		v->sizes[lbt_q_bucket(len)]++;
	}
}

static __always_inline struct lbt_ifslot *lbt_q_rx_iface(void *args, u32 name, u32 napi_id)
{
	struct lbt_ifslot *s;
	u64 *known = NULL, v;
	u32 i;

	if (napi_id >= LBT_MIN_NAPI_ID) {
		i = napi_id & (LBT_Q_NAPI_IDS - 1);
		known = lbt_q_napi_ids.lookup(&i);
		if (known) {
			v = *known;
			if ((u32)(v >> 32) == napi_id) {
				i = (u32)v;
				if (!i)
					return NULL;
				i -= 1;
				return lbt_ifaces.lookup(&i);
			}
		}
	}
	s = lbt_iface(args, name);
	if (known)
		*known = ((u64)napi_id << 32) | (s ? s->idx + 1 : 0);
	return s;
}

static __always_inline int lbt_q_rx_event(void *args, u32 name, u32 napi_id,
					  u32 queue_mapping, u32 len, int label)
{
	struct lbt_ifslot *s;
	u32 q;

	if (label)
		LBT_NAPI_LABEL(queue_mapping);
	s = lbt_q_rx_iface(args, name, napi_id);
	if (!s || !s->nrx)
		return 0;
	q = s->nrx == 1 ? 0 : queue_mapping - s->rx_off;
	if (q > s->nrx)
		q = s->nrx; /* queue not recorded, or out of range */
	lbt_q_add(0, s->base + q, len, 1);
	return 0;
}

/* One handler per rx entry tracepoint present on this kernel (they share one layout);
 * `label` is 1 for the entries that run inside a NAPI poll (see napi.bpf.c). */
#define LBT_QUEUES_RX(event, label)                                             \
int lbt_queues_##event(struct lbt_args_net_##event *args)                      \
{                                                                               \
	return lbt_q_rx_event(args, args->name, args->napi_id, args->queue_mapping, \
			      args->len, label);                                \
}

#ifndef LBT_Q_BTF_TX
int lbt_queues_net_dev_start_xmit(struct lbt_args_net_net_dev_start_xmit *args)
{
	struct lbt_ifslot *s = lbt_iface(args, args->name);
	u32 q, segs;

	if (!s || !s->ntx)
		return 0;
	q = args->queue_mapping;
	if (q > s->ntx)
		q = s->ntx;
	segs = args->gso_size ? args->gso_segs : 1;
	lbt_q_add(1, s->base + q, args->len, segs ? segs : 1);
	return 0;
}
#else
/* tx as a BTF-typed tracepoint (tp_btf): ctx[0] is the skb, ctx[1] the device. The name
 * and the skb's fields are read in place (offsets from the running kernel's BTF); only a
 * packet of a wanted device reads its GSO fields, from skb_shinfo(skb) = head + end,
 * which the verifier lets a program read only through a helper (a GSO skb counts
 * gso_segs wire packets, as the record's gso_size and gso_segs say). */
_Static_assert(LBT_SHINFO_GSO_SEGS == LBT_SHINFO_GSO_SIZE + 2, "gso_segs after gso_size");
int lbt_queues_net_dev_start_xmit(u64 *ctx)
{
	char *skb = (char *)ctx[0];
	struct lbt_ifslot *s = lbt_iface_dev((char *)ctx[1]);
	u16 gso[2] = {}; /* gso_size, gso_segs */
	u64 head;
	u32 q, segs = 1;

	if (!s || !s->ntx)
		return 0;
	q = *(u16 *)(skb + LBT_SKB_QUEUE_MAPPING);
	if (q > s->ntx)
		q = s->ntx;
	head = *(u64 *)(skb + LBT_SKB_HEAD) + *(u32 *)(skb + LBT_SKB_END);
	if (!bpf_probe_read_kernel(gso, sizeof(gso), (void *)(head + LBT_SHINFO_GSO_SIZE)) &&
	    gso[0] && gso[1])
		segs = gso[1];
	lbt_q_add(1, s->base + q, *(u32 *)(skb + LBT_SKB_LEN), segs);
	return 0;
}
#endif /* LBT_Q_BTF_TX */

#ifdef LBT_Q_BTF
/* rx entries as BTF-typed tracepoints (tp_btf), where the kernel has BTF: ctx[0] is the
 * skb itself, and the device, its name, the queue and the length are read in place at
 * offsets from the running kernel's BTF (LBT_SKB_*, LBT_DEV_NAME; the verifier checks
 * every load against that BTF). No helper call and no NAPI-id cache: reading the name in
 * place costs less than the cache's lookup. The kernel also skips building the event
 * record (and its copy of the name) for these programs. */
static __always_inline int lbt_q_rx_btf(u64 *ctx, int label)
{
	char *skb = (char *)ctx[0];
	char *dev = *(char **)(skb + LBT_SKB_DEV);
	u32 queue_mapping = *(u16 *)(skb + LBT_SKB_QUEUE_MAPPING);
	struct lbt_ifslot *s;
	u32 q;

	if (label)
		LBT_NAPI_LABEL(queue_mapping);
	s = lbt_iface_dev(dev);
	if (!s || !s->nrx)
		return 0;
	q = s->nrx == 1 ? 0 : queue_mapping - s->rx_off;
	if (q > s->nrx)
		q = s->nrx; /* queue not recorded, or out of range */
	lbt_q_add(0, s->base + q, *(u32 *)(skb + LBT_SKB_LEN), 1);
	return 0;
}

#define LBT_QUEUES_RX_BTF(event, label)                                         \
int lbt_queues_##event(u64 *ctx)                                                \
{                                                                               \
	return lbt_q_rx_btf(ctx, label);                                        \
}
#endif /* LBT_Q_BTF */
