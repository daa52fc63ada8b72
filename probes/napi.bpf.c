/* napi: napi:napi_poll work against budget per NAPI instance and CPU.
 *
 * A poll that used its whole budget (work >= budget) is one the softirq had to come back
 * to: the per-queue view of softnet's time_squeeze. Counts are per CPU, per NAPI instance
 * (its address, as the tracepoint gives it).
 *
 * Fast path without helper calls: a per-CPU direct-mapped table (LBT_N_CACHE entries)
 * indexed by a hash of the NAPI address. An entry remembers its instance and whether its
 * device is wanted, so the device name is copied only the first time an instance polls on
 * a CPU. An instance whose entry is taken goes to a per-CPU hash map (LBT_N_MAX keys; when
 * full, polls are counted in lbt_napi_lost). lbt_napi_taken counts the entries taken, which
 * keep their instance for the life of the map: while it stands still, the reader copies
 * only the entries it knows (see drops.bpf.c).
 *
 * Queue labels: an rx entry tracepoint fires for each packet a poll delivers, with the
 * packet's queue_mapping. LBT_NAPI_LABEL stores it per CPU with a poll generation; a poll
 * that finds a label of its own generation takes the label as its queue.
 */
struct lbt_nkey {
	u64 napi;
	u32 iface;
	u32 pad;
};

struct lbt_nval {
	u64 polls;
	u64 work;
	u64 exhausted; /* polls with work >= budget */
	u64 idle;      /* polls with work == 0 */
	u64 budget;    /* the last budget seen */
	u64 label;     /* queue_mapping + 1 of the last labelled poll, 0 when none */
};

struct lbt_nentry {
	struct lbt_nkey key; /* key.iface 0: this instance's device is not wanted */
	struct lbt_nval val;
};

struct lbt_nlabel {
	u64 gen;    /* polls so far on this CPU */
	u64 rx_gen; /* gen + 1 when the current poll delivered a packet */
	u64 qm;     /* that packet's queue_mapping */
};

BPF_PERCPU_ARRAY(lbt_napi_cache, struct lbt_nentry, LBT_N_CACHE);
BPF_PERCPU_HASH(lbt_napi, struct lbt_nkey, struct lbt_nval, LBT_N_MAX);
BPF_PERCPU_ARRAY(lbt_napi_lost, u64, 1);
BPF_PERCPU_ARRAY(lbt_napi_taken, u64, 1);
BPF_PERCPU_ARRAY(lbt_napi_cur, struct lbt_nlabel, 1);

static __always_inline void lbt_napi_label(u32 queue_mapping)
{
	u32 first = 0;
	struct lbt_nlabel *cur = lbt_napi_cur.lookup(&first);

	if (cur) {
		cur->rx_gen = cur->gen + 1;
		cur->qm = queue_mapping;
	}
}

/* Standalone label handlers, attached only when the queues probe does not run (its rx
 * handlers call LBT_NAPI_LABEL themselves). */
#define LBT_NAPI_RX(event)                                                      \
int lbt_napi_##event(struct lbt_args_net_##event *args)                        \
{                                                                               \
	lbt_napi_label(args->queue_mapping);                                    \
	return 0;                                                               \
}

static __always_inline void lbt_napi_add(struct lbt_nval *v, int work, int budget,
					 struct lbt_nlabel *cur)
{
	v->polls++;
	v->work += work;
	if (work >= budget)
		v->exhausted++;
	if (work == 0)
		v->idle++;
	v->budget = budget;
	if (cur && work > 0 && cur->rx_gen == cur->gen + 1)
		v->label = cur->qm + 1;
}

int lbt_napi_napi_poll(struct lbt_args_napi_napi_poll *args)
{
	u64 napi = (u64)args->napi, *lost, *taken;
	int work = args->work, budget = args->budget;
	struct lbt_nkey key = {};
	struct lbt_nval init = {}, *v;
	struct lbt_nlabel *cur;
	struct lbt_nentry *e;
	struct lbt_ifslot *s;
	u32 first = 0, slot;

	cur = lbt_napi_cur.lookup(&first);
	slot = (napi * 0x9E3779B97F4A7C15ULL) >> LBT_N_SHIFT;
	e = lbt_napi_cache.lookup(&slot);
	if (!e)
		goto next;
	if (e->key.napi == napi) {
		if (e->key.iface)
			lbt_napi_add(&e->val, work, budget, cur);
		goto next;
	}
	s = lbt_iface(args, args->dev_name);
	if (!e->key.napi) { /* a free entry on this CPU: this instance's from now on */
		e->key.napi = napi;
		e->key.iface = s ? s->id : 0;
		if (s)
			lbt_napi_add(&e->val, work, budget, cur);
		taken = lbt_napi_taken.lookup(&first);
		if (taken)
			(*taken)++;
		goto next;
	}
	if (!s)
		goto next;
	key.napi = napi;
	key.iface = s->id;
	v = lbt_napi.lookup_or_try_init(&key, &init);
	if (v) {
		lbt_napi_add(v, work, budget, cur);
	} else {
		lost = lbt_napi_lost.lookup(&first);
		if (lost)
			(*lost)++;
	}
next:
	if (cur)
		cur->gen++;
	return 0;
}
