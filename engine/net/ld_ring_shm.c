/* ld_ring_shm.c - the ring's link between two ranks on the same host: a
   POSIX shared-memory segment holding a single-producer single-consumer
   queue of chunk slots, instead of TCP over loopback.

   Over loopback every byte of a chunk is copied twice by the kernel (into
   the socket buffer, out of it) and once more by ZeroMQ's I/O thread; here
   the sender copies a chunk into a slot and the receiver adds it to its
   buffer straight from the slot, with no system call on the way. NCCL and
   MPI pick their shared-memory transport between ranks of one node the same
   way; ranks on different hosts keep the ZeroMQ link (ld_ring.c).

   Setup (ld_cluster.c): after the rendezvous each rank creates the segment
   it will receive on, named from the session's data-plane token, so only
   the cluster's members can find it; after a first barrier over ZeroMQ the
   sender opens its successor's segment, checks a tag derived from the same
   token, marks it attached and unlinks the name (the mapping stays); the
   receiver listens on it from the second barrier on (cl_shm_listen). A
   sender that cannot open it (another host, another /dev/shm) keeps sending
   over ZeroMQ, and the receiver listens on whichever link its sender took;
   so does a receiver whose segment does not fit in /dev/shm.
   LDIST_RING_TRANSPORT=tcp turns the shared-memory link off. */
#include "ld_cluster_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC 0x314d53524c444cull   /* "LDLRSM1" */
#define NSLOT 8
#define META 64                           /* per slot: data length and the ring's chunk header */

typedef struct {
    uint64_t magic, slot_bytes, nslot;
    unsigned char tag[32];
    _Alignas(64) uint64_t head;           /* slots written (the sender's) */
    _Alignas(64) uint64_t tail;           /* slots consumed (the receiver's) */
    _Alignas(64) uint32_t attached;       /* the sender uses this link */
} shm_hdr;

struct cl_shm {
    shm_hdr *h;
    unsigned char *slots;
    size_t map_len, stride, slot_bytes;
    char name[64];
    int linked;                           /* the name still exists (the receiver unlinks it at the end) */
    int live;                             /* receiver: every chunk sent over ZeroMQ before has arrived */
};

static int transport_off(void) {
    const char *t = getenv("LDIST_RING_TRANSPORT");
    return t && !strcmp(t, "tcp");
}

/* name and tag of rank r's receiving segment */
static void derive(ld_cluster *c, int r, char *name, size_t n, unsigned char tag[32]) {
    unsigned char d[32];
    char rk[16], hex[33];
    snprintf(rk, sizeof rk, "%d", r);
    cl_part pn[3] = {{"ldist-shm-name", 14}, {c->session, 16}, {rk, strlen(rk)}};
    cl_hmac(c->token, 64, pn, 3, d);
    cl_to_hex(d, 16, hex);
    snprintf(name, n, "/ldist-%s", hex);
    cl_part pt[3] = {{"ldist-shm-tag", 13}, {c->session, 16}, {rk, strlen(rk)}};
    cl_hmac(c->token, 64, pt, 3, tag);
}

static cl_shm *map_segment(int fd, size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return NULL;
    cl_shm *s = calloc(1, sizeof *s);
    if (!s) { munmap(p, len); return NULL; }
    s->h = p;
    s->map_len = len;
    return s;
}

static size_t stride_of(size_t slot_bytes) { return (META + slot_bytes + 63) & ~(size_t)63; }

int cl_shm_create(ld_cluster *c) {
    if (transport_off() || c->size < 2) return LD_OK;
    char name[64];
    unsigned char tag[32];
    derive(c, c->rank, name, sizeof name, tag);
    size_t stride = stride_of(c->chunk_bytes), len = sizeof(shm_hdr) + NSLOT * stride;
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return LD_OK;             /* no shared memory here: the ZeroMQ link stays */
    cl_shm *s = NULL;
    /* reserve the pages now: a tmpfs too small for them (a container's
       64 MB /dev/shm) would otherwise kill the process with SIGBUS at the
       first write past its end, mid-collective */
    if (ftruncate(fd, (off_t)len) == 0 && posix_fallocate(fd, 0, (off_t)len) == 0) s = map_segment(fd, len);
    close(fd);
    if (!s) { shm_unlink(name); return LD_OK; }
    memset(s->h, 0, sizeof *s->h);
    memcpy(s->h->tag, tag, 32);
    s->h->slot_bytes = c->chunk_bytes;
    s->h->nslot = NSLOT;
    __atomic_store_n(&s->h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
    s->slots = (unsigned char *)s->h + sizeof(shm_hdr);
    s->stride = stride;
    s->slot_bytes = c->chunk_bytes;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->linked = 1;
    c->shm_rx = s;
    return LD_OK;
}

int cl_shm_attach(ld_cluster *c) {
    if (transport_off() || c->size < 2) return LD_OK;
    int next = (c->rank + 1) % c->size;
    char name[64];
    unsigned char tag[32];
    derive(c, next, name, sizeof name, tag);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return LD_OK;             /* on another host: ZeroMQ */
    struct stat st;
    cl_shm *s = NULL;
    size_t stride = stride_of(c->chunk_bytes), len = sizeof(shm_hdr) + NSLOT * stride;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == len) s = map_segment(fd, len);
    close(fd);
    if (!s) return LD_OK;
    if (__atomic_load_n(&s->h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC || memcmp(s->h->tag, tag, 32) ||
        s->h->slot_bytes != c->chunk_bytes || s->h->nslot != NSLOT) {
        munmap(s->h, s->map_len);
        free(s);
        return LD_OK;
    }
    s->slots = (unsigned char *)s->h + sizeof(shm_hdr);
    s->stride = stride;
    s->slot_bytes = c->chunk_bytes;
    shm_unlink(name);                     /* both ends have it mapped: nothing is left behind */
    __atomic_store_n(&s->h->attached, 1, __ATOMIC_RELEASE);
    c->shm_tx = s;
    return LD_OK;
}

static void shm_free(cl_shm *s) {
    if (!s) return;
    if (s->linked) shm_unlink(s->name);   /* ENOENT once the sender has unlinked it */
    munmap(s->h, s->map_len);
    free(s);
}

void cl_shm_close(ld_cluster *c) {
    shm_free(c->shm_rx);
    shm_free(c->shm_tx);
    c->shm_rx = c->shm_tx = NULL;
}

/* The receiver switches links only once it has finished the collective
   during which its sender attached (cl_shm_listen after the first setup
   barrier): until then chunks of that collective may still be on their way
   over ZeroMQ, and the sender's next ones would overtake them. */
void cl_shm_listen(ld_cluster *c) { if (c->shm_rx) c->shm_rx->live = 1; }
int cl_shm_attached(const cl_shm *s) { return s && s->live && __atomic_load_n(&s->h->attached, __ATOMIC_ACQUIRE); }

int cl_shm_send(cl_shm *s, const void *meta, size_t mlen, const void *data, size_t n) {
    if (n > s->slot_bytes || mlen > META - 8) return -1;
    uint64_t head = s->h->head, tail = __atomic_load_n(&s->h->tail, __ATOMIC_ACQUIRE);
    if (head - tail >= NSLOT) return 0;   /* full: the receiver is behind */
    unsigned char *slot = s->slots + (head % NSLOT) * s->stride;
    uint64_t n64 = n;
    memcpy(slot, &n64, 8);
    memcpy(slot + 8, meta, mlen);
    cl_copy_par(slot + META, data, n);   /* over the process's threads (ld_ring.c) */
    __atomic_store_n(&s->h->head, head + 1, __ATOMIC_RELEASE);
    return 1;
}

const void *cl_shm_recv(cl_shm *s, void *meta, size_t mlen, size_t *n) {
    uint64_t tail = s->h->tail, head = __atomic_load_n(&s->h->head, __ATOMIC_ACQUIRE);
    if (head == tail) return NULL;
    const unsigned char *slot = s->slots + (tail % NSLOT) * s->stride;
    uint64_t n64;
    memcpy(&n64, slot, 8);
    memcpy(meta, slot + 8, mlen);
    *n = n64 <= s->slot_bytes ? (size_t)n64 : s->slot_bytes;
    return slot + META;
}

void cl_shm_release(cl_shm *s) {
    __atomic_store_n(&s->h->tail, s->h->tail + 1, __ATOMIC_RELEASE);
}

void ld_cluster_links(ld_cluster *c, const char **to_next, const char **from_prev) {
    if (c->mpi) { *to_next = *from_prev = "mpi"; return; }    /* no ring: MPI carries the data */
    *to_next = c->shm_tx ? "shm" : "tcp";
    *from_prev = cl_shm_attached(c->shm_rx) ? "shm" : "tcp";
}
