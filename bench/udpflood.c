/* A 64-byte UDP flood for bench/probes.py: sendmmsg() batches of minimum-size datagrams
 * (22-byte payload: 14 Ethernet + 20 IP + 8 UDP + 22 = 64-byte frames, FCS excluded) from
 * SRC to DST:PORT for SECONDS, then prints the number of datagrams sent.
 *
 * usage: udpflood SRC DST PORT SECONDS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define PAYLOAD 22

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	char payload[PAYLOAD];
	unsigned long long sent = 0;
	double end;
	int fd, i, n;

	if (argc != 5) {
		fprintf(stderr, "usage: %s SRC DST PORT SECONDS\n", argv[0]);
		return 2;
	}
	if (inet_pton(AF_INET, argv[1], &src.sin_addr) != 1 ||
	    inet_pton(AF_INET, argv[2], &dst.sin_addr) != 1) {
		fprintf(stderr, "bad address\n");
		return 2;
	}
	dst.sin_port = htons(atoi(argv[3]));
	end = now() + atof(argv[4]);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0 ||
	    connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
		perror("socket");
		return 1;
	}
	memset(payload, 'x', sizeof(payload));
	memset(msgs, 0, sizeof(msgs));
	for (i = 0; i < BATCH; i++) {
		iov[i].iov_base = payload;
		iov[i].iov_len = sizeof(payload);
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	while (now() < end) {
		n = sendmmsg(fd, msgs, BATCH, 0);
		if (n > 0)
			sent += n;
	}
	printf("%llu\n", sent);
	return 0;
}
