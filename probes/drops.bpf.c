/* drops: skb:kfree_skb aggregated in the kernel by (reason, location, protocol).
 *
 * LBT_D_REASON is defined when the kernel's kfree_skb has a `reason` field (5.17+); the
 * numeric values of NOT_DROPPED_YET and CONSUMED come from the running kernel (they are
 * frees, not drops) and are defined only where the kernel has them. Without reasons every
 * kfree_skb counts, keyed by location only.
 *
 * Fast path without helper calls: a per-CPU direct-mapped table (LBT_D_CACHE entries)
 * indexed by a multiplicative hash of the key; an entry holds its key and count. A key
 * whose entry is taken by another key goes to a per-CPU hash map (LBT_D_MAX keys); events
 * that find that full too are counted in lbt_drops_lost. Everything is bounded.
 */
struct lbt_dkey {
	u64 location;
	u32 reason;
	u16 protocol;
	u16 pad;
};

struct lbt_dentry {
	struct lbt_dkey key;
	u64 count;
};

BPF_PERCPU_ARRAY(lbt_drops_cache, struct lbt_dentry, LBT_D_CACHE);
BPF_PERCPU_HASH(lbt_drops, struct lbt_dkey, u64, LBT_D_MAX);
BPF_PERCPU_ARRAY(lbt_drops_lost, u64, 1);

int lbt_drops_kfree_skb(struct lbt_args_skb_kfree_skb *args)
{
	u64 location = (u64)args->location, zero = 0, *count;
	u32 reason = 0, first = 0, slot;
	u16 protocol = args->protocol;
	struct lbt_dentry *e;
	struct lbt_dkey key = {};

#ifdef LBT_D_REASON
	reason = args->reason;
#ifdef LBT_D_NOT_DROPPED_YET
	if (reason == LBT_D_NOT_DROPPED_YET)
		return 0;
#endif
#ifdef LBT_D_CONSUMED
	if (reason == LBT_D_CONSUMED)
		return 0;
#endif
#endif
	slot = ((location ^ ((u64)reason << 32) ^ protocol) * 0x9E3779B97F4A7C15ULL) >> LBT_D_SHIFT;
	e = lbt_drops_cache.lookup(&slot);
	if (!e)
		return 0;
	if (e->key.location == location && e->key.reason == reason &&
	    e->key.protocol == protocol) {
		e->count++;
		return 0;
	}
	if (!e->count) { /* a free entry on this CPU: take it */
		e->key.location = location;
		e->key.reason = reason;
		e->key.protocol = protocol;
		e->count = 1;
		return 0;
	}
	key.location = location;
	key.reason = reason;
	key.protocol = protocol;
	count = lbt_drops.lookup_or_try_init(&key, &zero);
	if (count) {
		(*count)++;
		return 0;
	}
	count = lbt_drops_lost.lookup(&first);
	if (count)
		(*count)++;
	return 0;
}
