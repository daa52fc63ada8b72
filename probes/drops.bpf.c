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
 *
 * An entry, once taken, keeps its key for the life of the map, and lbt_drops_taken counts
 * the entries taken: while it stands still, the reader copies only the entries it already
 * knows instead of the whole table (the monitor reads it every second). Counted only when
 * an entry is taken, never on the fast path.
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
BPF_PERCPU_ARRAY(lbt_drops_taken, u64, 1);

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
		count = lbt_drops_taken.lookup(&first);
		if (count)
			(*count)++;
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

/* Closed ports: which local port the packets nothing listens on were sent to.
 *
 * A TCP segment for no socket is answered with a reset whose tcp:tcp_send_reset record has
 * reason NO_SOCKET (LBT_P_RST_NO_SOCKET, this kernel's number) and the reset's own source,
 * i.e. the local address and port the segment was sent to, as a sockaddr (family, port in
 * network order, address). A UDP datagram for no socket is answered (IPv4) with ICMP port
 * unreachable, whose icmp:icmp_send record carries the datagram's addresses and ports (host
 * order). Both are counted per (protocol, family, local address, local port).
 *
 * Fast path without helper calls, as for drops: a per-CPU direct-mapped table (LBT_P_CACHE
 * entries) indexed by a multiplicative hash of the key; an entry holds its key and count. A
 * key whose entry is taken goes to a per-CPU hash of at most LBT_P_MAX keys; events beyond
 * it count in lbt_ports_lost. lbt_ports_taken counts the entries taken (see lbt_drops_taken).
 */
struct lbt_pkey {
	u64 a0;  /* the local address: 16 bytes (IPv4: the first 4), as two words */
	u64 a1;
	u16 port;
	u8 proto;  /* 6 TCP, 17 UDP */
	u8 family; /* 4 or 6 */
	u32 pad;
};

struct lbt_pentry {
	struct lbt_pkey key;
	u64 count;
};

#if defined(LBT_P_RST) || defined(LBT_P_ICMP)
BPF_PERCPU_ARRAY(lbt_ports_cache, struct lbt_pentry, LBT_P_CACHE);
BPF_PERCPU_HASH(lbt_ports, struct lbt_pkey, u64, LBT_P_MAX);
BPF_PERCPU_ARRAY(lbt_ports_lost, u64, 1);
BPF_PERCPU_ARRAY(lbt_ports_taken, u64, 1);

static __always_inline void lbt_port_count(struct lbt_pkey *key)
{
	u64 zero = 0, *count;
	u32 first = 0, slot;
	u64 tag = key->port | ((u64)key->proto << 16) | ((u64)key->family << 24);
	struct lbt_pentry *e;

	slot = ((key->a0 ^ (key->a1 * 0x9E3779B97F4A7C15ULL) ^ (tag << 32)) *
		0x9E3779B97F4A7C15ULL) >> LBT_P_SHIFT;
	e = lbt_ports_cache.lookup(&slot);
	if (!e)
		return;
	if (e->key.a0 == key->a0 && e->key.a1 == key->a1 && e->key.port == key->port &&
	    e->key.proto == key->proto && e->key.family == key->family) {
		e->count++;
		return;
	}
	if (!e->count) { /* a free entry on this CPU: take it */
		e->key = *key;
		e->count = 1;
		count = lbt_ports_taken.lookup(&first);
		if (count)
			(*count)++;
		return;
	}
	count = lbt_ports.lookup_or_try_init(key, &zero);
	if (count) {
		(*count)++;
		return;
	}
	count = lbt_ports_lost.lookup(&first);
	if (count)
		(*count)++;
}
#endif

#ifdef LBT_P_RST
int lbt_drops_tcp_send_reset(struct lbt_args_tcp_tcp_send_reset *args)
{
	struct lbt_pkey key = {};
	u16 family;

	if (args->reason != LBT_P_RST_NO_SOCKET)
		return 0;
	family = args->saddr[0] | (args->saddr[1] << 8);
	key.port = (args->saddr[2] << 8) | args->saddr[3];
	key.proto = 6;
	if (family == 2) { /* AF_INET: sin_addr at offset 4 */
		key.family = 4;
		__builtin_memcpy(&key.a0, &args->saddr[4], 4);
	} else if (family == 10) { /* AF_INET6: sin6_addr at offset 8 */
		key.family = 6;
		__builtin_memcpy(&key.a0, &args->saddr[8], 8);
		__builtin_memcpy(&key.a1, &args->saddr[16], 8);
	} else {
		return 0;
	}
	lbt_port_count(&key);
	return 0;
}
#endif

#ifdef LBT_P_ICMP
int lbt_drops_icmp_send(struct lbt_args_icmp_icmp_send *args)
{
	struct lbt_pkey key = {};

	/* destination unreachable / port unreachable, for a UDP datagram (ports 0 otherwise) */
	if (args->type != 3 || args->code != 3 || (args->sport == 0 && args->dport == 0))
		return 0;
	key.port = args->dport;
	key.proto = 17;
	key.family = 4;
	__builtin_memcpy(&key.a0, args->daddr, 4);
	lbt_port_count(&key);
	return 0;
}
#endif
