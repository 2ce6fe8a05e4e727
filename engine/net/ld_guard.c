/*
 * ld_guard.c - connection limits for peers that have not authenticated (see
 * ld_guard.h). Thread-safe: the kernel trusts from its shell, control and
 * stdin threads and enforces from its guard thread.
 */
#include "ld_guard.h"
#include "ld_cluster_internal.h"

#include <zmq.h>

#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef struct {
    int fd;
    int trusted;
    uint64_t seq;          /* order of acceptance */
    int64_t bytes;         /* received, at the last enforcement */
} conn;

struct ld_guard {
    pthread_mutex_t mu;
    char what[96];
    int max_conns, shed_newest;
    int64_t max_bytes;
    ld_guard_log_fn log;
    void *ud;
    conn *c;
    int n, cap;
    uint64_t seq;
};

ld_guard *ld_guard_new(const char *what, int max_conns, int64_t max_bytes, int shed_newest, ld_guard_log_fn log, void *ud) {
    ld_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    pthread_mutex_init(&g->mu, NULL);
    snprintf(g->what, sizeof g->what, "%s", what ? what : "sockets");
    g->max_conns = max_conns;
    g->max_bytes = max_bytes;
    g->shed_newest = shed_newest;
    g->log = log;
    g->ud = ud;
    return g;
}

void ld_guard_free(ld_guard *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    free(g->c);
    free(g);
}

static int find(ld_guard *g, int fd) {
    for (int i = 0; i < g->n; i++) if (g->c[i].fd == fd) return i;
    return -1;
}

static void drop(ld_guard *g, int i) { g->c[i] = g->c[--g->n]; }

/* bytes this connection received (0 where TCP_INFO does not answer: ipc) */
static int64_t received(int fd) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return 0;
    if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) return 0;
    return (int64_t)ti.tcpi_bytes_received;
}

/* under g->mu: shut connection i down (ZeroMQ notices and frees its buffers) */
static void shed(ld_guard *g, int i, const char *why) {
    char line[300];
    snprintf(line, sizeof line, "%s: closed a connection that has not authenticated (%s)", g->what, why);
    if (g->log) g->log(g->ud, line);
    else cl_log_rejected("%s", line);
    shutdown(g->c[i].fd, SHUT_RDWR);
    drop(g, i);
}

static int untrusted(ld_guard *g) {
    int k = 0;
    for (int i = 0; i < g->n; i++) k += !g->c[i].trusted;
    return k;
}

/* under g->mu: shed the oldest (or newest) untrusted connections over max_conns */
static int shed_count(ld_guard *g) {
    int k = 0;
    while (g->max_conns >= 0 && untrusted(g) > g->max_conns) {
        int pick = -1;
        for (int i = 0; i < g->n; i++) {
            if (g->c[i].trusted) continue;
            if (pick < 0 || (g->shed_newest ? g->c[i].seq > g->c[pick].seq : g->c[i].seq < g->c[pick].seq)) pick = i;
        }
        char why[96];
        snprintf(why, sizeof why, "more than %d such connections", g->max_conns);
        shed(g, pick, why);
        k++;
    }
    return k;
}

void ld_guard_accepted(ld_guard *g, int fd) {
    if (!g || fd < 0) return;
    pthread_mutex_lock(&g->mu);
    int i = find(g, fd);
    if (i >= 0) drop(g, i);          /* a descriptor reused after a close we did not see */
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 16;
        conn *nc = realloc(g->c, (size_t)cap * sizeof *nc);
        if (!nc) { shutdown(fd, SHUT_RDWR); pthread_mutex_unlock(&g->mu); return; }
        g->c = nc;
        g->cap = cap;
    }
    g->c[g->n++] = (conn){fd, 0, ++g->seq, received(fd)};
    shed_count(g);
    pthread_mutex_unlock(&g->mu);
}

void ld_guard_closed(ld_guard *g, int fd) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    int i = find(g, fd);
    if (i >= 0) drop(g, i);
    pthread_mutex_unlock(&g->mu);
}

void ld_guard_trust(ld_guard *g, int fd) {
    if (!g || fd < 0) return;
    pthread_mutex_lock(&g->mu);
    int i = find(g, fd);
    if (i >= 0) g->c[i].trusted = 1;
    pthread_mutex_unlock(&g->mu);
}

void ld_guard_event(ld_guard *g, const void *frame, size_t n) {
    if (!g || n < 6) return;
    uint16_t ev;
    int32_t val;
    memcpy(&ev, frame, 2);
    memcpy(&val, (const char *)frame + 2, 4);
    if (ev == ZMQ_EVENT_ACCEPTED) ld_guard_accepted(g, val);
    else if (ev == ZMQ_EVENT_DISCONNECTED || ev == ZMQ_EVENT_CLOSED) ld_guard_closed(g, val);
}

int ld_guard_enforce(ld_guard *g) {
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    int k = shed_count(g);
    if (g->max_bytes >= 0) {
        int64_t total = 0;
        for (int i = 0; i < g->n; i++)
            if (!g->c[i].trusted) total += g->c[i].bytes = received(g->c[i].fd);
        while (total > g->max_bytes) {
            int pick = -1;
            for (int i = 0; i < g->n; i++)
                if (!g->c[i].trusted && (pick < 0 || g->c[i].bytes > g->c[pick].bytes)) pick = i;
            if (pick < 0) break;
            total -= g->c[pick].bytes;
            char why[128];
            snprintf(why, sizeof why, "%lld bytes received; connections that have not authenticated may hold %lld in all",
                     (long long)g->c[pick].bytes, (long long)g->max_bytes);
            shed(g, pick, why);
            k++;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return k;
}

int ld_guard_untrusted(ld_guard *g, int64_t *bytes) {
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    int k = 0;
    int64_t b = 0;
    for (int i = 0; i < g->n; i++)
        if (!g->c[i].trusted) { k++; b += g->c[i].bytes; }
    pthread_mutex_unlock(&g->mu);
    if (bytes) *bytes = b;
    return k;
}
