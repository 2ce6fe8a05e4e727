/* ld_ps_shm.c - the parameter server's data path between processes of one
   host: a POSIX shared-memory segment per (client, ps task) pair, as the
   ring's link (ld_ring_shm.c) is per pair of ranks.

   The client (the coordinator or a worker) creates the segment under a
   random name (128 bits) with mode 0600 and writes a random 256-bit tag in
   its header; it sends the name, the tag and the size to the ps task in an
   authenticated control message. The ps task opens it, checks the tag and
   the size, and unlinks the name (both ends keep the mapping, nothing is
   left in /dev/shm). A pull is then a small control message, the ps's copy
   of its variables into the segment and a small answer; a push is the
   client's copy of its gradients into the segment and a small control
   message (the client does not touch the segment until the answer). A ps
   task that cannot open the segment (another host) says so, and that pair
   keeps the network path.

   Once the ps has mapped it, the requests themselves (pull, push) and their
   answers can skip the control plane too: the segment's header holds a
   mailbox of NMSG request slots and NMSG answer slots. The client writes a
   request into the next slot, publishes it (req_seq) and rings the ps's
   doorbell, a pipe whose /proc path the ps wrote in the header when it
   mapped the segment; the ps polls the doorbell
   beside its control socket, answers into the answer slot and wakes the
   client through a futex on ans_seq. Two handoffs per round trip instead of
   the control plane's dozen (threads, sockets, signatures); only the two
   processes that share the mapping can reach the mailbox. */
#define _GNU_SOURCE
#include "ld_ps_shm.h"
#include "ld_cluster.h"
#include "ld_core.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PSHM_MAGIC 0x314d48535350444cull    /* "LDPSSHM1" */
#define NMSG 4                                /* mailbox slots each way */
#define MSG_SLOT 8192                         /* bytes per slot: [u32 length][u8 type length][type][body] */
#define PSHM_HDR (4096 + 2 * NMSG * MSG_SLOT) /* header bytes before the data (page aligned) */

typedef struct {
    uint64_t magic, bytes;
    unsigned char tag[32];
    _Alignas(64) uint32_t req_seq;            /* requests published (the client's) */
    _Alignas(64) uint32_t ans_seq;            /* answers published (the ps's; the client's futex) */
    _Alignas(64) char bell[256];              /* the ps's doorbell FIFO ("" until it maps the segment) */
    _Alignas(64) char cbell[256];             /* the client's doorbell, rung at each answer ("": none, the futex only) */
} pshm_hdr;

struct ld_ps_shm {
    unsigned char *map;
    size_t map_len, bytes;
    char name[64];
    char tag[65];
    int linked;
    uint32_t req_sent, ans_seen;              /* client: published / answers read; ps: requests taken */
    int bell_fd;                              /* client: the ps's doorbell, opened at the first post (-1) */
    int cbell_fd;                             /* ps: the client's doorbell, opened at the first answer (-1) */
    int refs;                                 /* the owner's, and one per tensor viewing the data (ld_ps_shm_retain) */
};

static void hex(const unsigned char *b, size_t n, char *out) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) { out[2 * i] = d[b[i] >> 4]; out[2 * i + 1] = d[b[i] & 15]; }
    out[2 * n] = 0;
}

ld_ps_shm *ld_ps_shm_create(size_t bytes) {
    unsigned char rnd[16], tag[32];
    if (ld_random_bytes(rnd, sizeof rnd) || ld_random_bytes(tag, sizeof tag)) {
        ld_fail(LD_EIO, "ps shared memory: no random bytes");
        return NULL;
    }
    ld_ps_shm *s = calloc(1, sizeof *s);
    if (!s) { ld_fail(LD_ENOMEM, "ps shared memory: out of memory"); return NULL; }
    char h[33];
    hex(rnd, 16, h);
    snprintf(s->name, sizeof s->name, "/ldist-ps-%s", h);
    hex(tag, 32, s->tag);
    s->bytes = bytes;
    s->map_len = PSHM_HDR + bytes;
    int fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) { ld_fail(LD_EIO, "ps shared memory: shm_open: %s", strerror(errno)); free(s); return NULL; }
    /* reserve the pages now (a small /dev/shm would SIGBUS at the first write past its end) */
    int ok = ftruncate(fd, (off_t)s->map_len) == 0 && posix_fallocate(fd, 0, (off_t)s->map_len) == 0;
    void *p = ok ? mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(s->name);
        free(s);
        ld_fail(LD_EIO, "ps shared memory: no room for %zu bytes in /dev/shm", bytes);
        return NULL;
    }
    s->map = p;
    s->linked = 1;
    s->bell_fd = -1;
    s->cbell_fd = -1;
    s->refs = 1;
    pshm_hdr *hd = p;
    hd->bytes = bytes;
    memcpy(hd->tag, tag, 32);
    __atomic_store_n(&hd->magic, PSHM_MAGIC, __ATOMIC_RELEASE);
    return s;
}

ld_ps_shm *ld_ps_shm_open(const char *name, const char *tag_hex, size_t bytes) {
    if (!name || strncmp(name, "/ldist-ps-", 10) || strlen(name) != 42 || strchr(name + 1, '/') ||
        !tag_hex || strlen(tag_hex) != 64) {
        ld_fail(LD_EARG, "ps shared memory: a malformed segment name or tag");
        return NULL;
    }
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) { ld_fail(LD_EIO, "ps shared memory: %s is not on this host", name); return NULL; }
    struct stat st;
    size_t len = PSHM_HDR + bytes;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 077) == 0 && (size_t)st.st_size == len)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) { ld_fail(LD_EIO, "ps shared memory: %s does not match", name); return NULL; }
    pshm_hdr *hd = p;
    char th[65];
    hex(hd->tag, 32, th);
    if (__atomic_load_n(&hd->magic, __ATOMIC_ACQUIRE) != PSHM_MAGIC || hd->bytes != bytes || strcmp(th, tag_hex)) {
        munmap(p, len);
        ld_fail(LD_EIO, "ps shared memory: %s does not match", name);
        return NULL;
    }
    ld_ps_shm *s = calloc(1, sizeof *s);
    if (!s) { munmap(p, len); ld_fail(LD_ENOMEM, "ps shared memory: out of memory"); return NULL; }
    s->map = p;
    s->map_len = len;
    s->bytes = bytes;
    s->bell_fd = -1;
    s->cbell_fd = -1;
    s->refs = 1;
    s->req_sent = __atomic_load_n(&hd->req_seq, __ATOMIC_ACQUIRE);
    snprintf(s->name, sizeof s->name, "%s", name);
    memcpy(s->tag, th, 65);
    shm_unlink(name);   /* both ends have it mapped: nothing is left behind */
    return s;
}

const char *ld_ps_shm_name(const ld_ps_shm *s) { return s->name; }
const char *ld_ps_shm_tag(const ld_ps_shm *s) { return s->tag; }
size_t ld_ps_shm_size(const ld_ps_shm *s) { return s->bytes; }
unsigned char *ld_ps_shm_data(ld_ps_shm *s) { return s->map + PSHM_HDR; }
void ld_ps_shm_unlink(ld_ps_shm *s) {
    if (s && s->linked) { shm_unlink(s->name); s->linked = 0; }
}
void ld_ps_shm_retain(ld_ps_shm *s) { __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED); }
void ld_ps_shm_release(ld_ps_shm *s) {
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    if (s->bell_fd >= 0) close(s->bell_fd);
    if (s->cbell_fd >= 0) close(s->cbell_fd);
    munmap(s->map, s->map_len);
    free(s);
}
void ld_ps_shm_close(ld_ps_shm *s) {
    if (!s) return;
    ld_ps_shm_unlink(s);
    ld_ps_shm_release(s);
}

/* ---------------------------------------------------------------- the mailbox */
/* A byte to a doorbell. The other end may have died (its pipe's read end
   closed with it): that write fails with EPIPE, and must not kill this
   process with SIGPIPE, which is blocked around it and taken back if it came. */
static int ring(int fd) {
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    char b = 1;
    ssize_t r = write(fd, &b, 1);
    int err = errno;
    if (r < 0 && err == EPIPE) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) > 0) {}
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return r < 0 && err != EAGAIN ? -1 : 0;   /* full: wake-ups are pending anyway */
}

static unsigned char *req_slot(ld_ps_shm *s, uint32_t i) { return s->map + 4096 + (size_t)(i % NMSG) * MSG_SLOT; }
static unsigned char *ans_slot(ld_ps_shm *s, uint32_t i) { return s->map + 4096 + (size_t)(NMSG + i % NMSG) * MSG_SLOT; }

static int put_msg(unsigned char *slot, const char *type, const void *body, size_t n) {
    size_t tl = strlen(type);
    if (tl == 0 || tl > 31 || 5 + tl + n > MSG_SLOT) return -1;
    uint32_t len = (uint32_t)(1 + tl + n);
    memcpy(slot, &len, 4);
    slot[4] = (unsigned char)tl;
    memcpy(slot + 5, type, tl);
    memcpy(slot + 5 + tl, body, n);
    return 0;
}
static int get_msg(const unsigned char *slot, char type[32], const void **body, size_t *n) {
    uint32_t len;
    memcpy(&len, slot, 4);
    size_t tl = slot[4];
    if (len < 1 + tl || tl == 0 || tl > 31 || len > MSG_SLOT - 4) return -1;
    memcpy(type, slot + 5, tl);
    type[tl] = 0;
    *body = slot + 5 + tl;
    *n = len - 1 - tl;
    return 0;
}

int ld_ps_shm_room(ld_ps_shm *s) {
    pshm_hdr *hd = (pshm_hdr *)s->map;
    return hd->bell[0] == '/' ? NMSG - (int)(s->req_sent - s->ans_seen) : 0;
}
size_t ld_ps_shm_msg_max(void) { return MSG_SLOT - 5 - 31; }

int ld_ps_shm_post(ld_ps_shm *s, const char *type, const void *body, size_t n) {
    pshm_hdr *hd = (pshm_hdr *)s->map;
    if (ld_ps_shm_room(s) < 1) return -1;
    if (s->bell_fd < 0) {
        char path[256];
        memcpy(path, hd->bell, sizeof path);
        path[255] = 0;
        if (strncmp(path, "/proc/", 6)) return -1;
        s->bell_fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (s->bell_fd < 0) return -1;
    }
    if (put_msg(req_slot(s, s->req_sent), type, body, n)) return -1;
    s->req_sent++;
    __atomic_store_n(&hd->req_seq, s->req_sent, __ATOMIC_RELEASE);
    if (ring(s->bell_fd)) return -2;
    return 0;
}

int ld_ps_shm_wait(ld_ps_shm *s, double timeout, char type[32], const void **body, size_t *n) {
    pshm_hdr *hd = (pshm_hdr *)s->map;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        uint32_t a = __atomic_load_n(&hd->ans_seq, __ATOMIC_ACQUIRE);
        if (a != s->ans_seen) {
            if (get_msg(ans_slot(s, s->ans_seen), type, body, n)) { ld_fail(LD_EIO, "ps shared memory: a malformed answer"); return -1; }
            s->ans_seen++;
            return 1;
        }
        if (ld_interrupt_flag) { ld_fail(LD_EINTERRUPT, "interrupted"); return -1; }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left = timeout - ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9);
        if (left <= 0) return 0;
        if (left > 0.05) left = 0.05;     /* wake now and then for Ctrl-C */
        struct timespec ts = {0, (long)(left * 1e9)};
        syscall(SYS_futex, &hd->ans_seq, FUTEX_WAIT, a, &ts, NULL, 0);
    }
}

int ld_ps_shm_take(ld_ps_shm *s, char type[32], const void **body, size_t *n) {
    pshm_hdr *hd = (pshm_hdr *)s->map;
    uint32_t r = __atomic_load_n(&hd->req_seq, __ATOMIC_ACQUIRE);
    if (r == s->req_sent) return 0;
    if (r - s->req_sent > NMSG) { s->req_sent = r; ld_fail(LD_EIO, "ps shared memory: the mailbox overflowed"); return -1; }
    int bad = get_msg(req_slot(s, s->req_sent), type, body, n);
    s->req_sent++;
    if (bad) { ld_fail(LD_EIO, "ps shared memory: a malformed request"); return -1; }
    return 1;
}

int ld_ps_shm_answer(ld_ps_shm *s, const char *type, const void *body, size_t n) {
    pshm_hdr *hd = (pshm_hdr *)s->map;
    uint32_t a = __atomic_load_n(&hd->ans_seq, __ATOMIC_RELAXED);
    if (put_msg(ans_slot(s, a), type, body, n)) { ld_fail(LD_EARG, "ps shared memory: an answer of %zu bytes does not fit", n); return -1; }
    __atomic_store_n(&hd->ans_seq, a + 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &hd->ans_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
    /* a client that waits on several segments at once has a doorbell of its own */
    if (s->cbell_fd == -1 && !strncmp(hd->cbell, "/proc/", 6)) {
        char path[256];
        memcpy(path, hd->cbell, sizeof path);
        path[255] = 0;
        s->cbell_fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    }
    if (s->cbell_fd >= 0 && ring(s->cbell_fd)) { close(s->cbell_fd); s->cbell_fd = -2; }
    return 0;
}

void ld_ps_shm_set_bell(ld_ps_shm *s, const char *path) {
    pshm_hdr *hd = (pshm_hdr *)s->map;
    snprintf(hd->bell, sizeof hd->bell, "%s", path);
}
void ld_ps_shm_set_client_bell(ld_ps_shm *s, const char *path) {
    pshm_hdr *hd = (pshm_hdr *)s->map;
    snprintf(hd->cbell, sizeof hd->cbell, "%s", path);
}

/* ---------------------------------------------------------------- the ps's doorbell
   A pipe; the clients open its write end through /proc/<pid>/fd/<n> (only
   processes of the same user on this host can), so nothing is created in a
   file system and nothing is left behind when the ps is killed. */
struct ld_ps_bell { int rfd, wfd; char path[64]; };

ld_ps_bell *ld_ps_bell_create(void) {
    ld_ps_bell *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC)) { free(b); return NULL; }
    b->rfd = fds[0];
    b->wfd = fds[1];   /* stays open: the path stays valid and a poll never sees a hang-up */
    snprintf(b->path, sizeof b->path, "/proc/%d/fd/%d", (int)getpid(), b->wfd);
    return b;
}
const char *ld_ps_bell_path(const ld_ps_bell *b) { return b->path; }
int ld_ps_bell_fd(const ld_ps_bell *b) { return b->rfd; }
void ld_ps_bell_drain(ld_ps_bell *b) {
    char buf[256];
    while (read(b->rfd, buf, sizeof buf) > 0) {}
}
void ld_ps_bell_close(ld_ps_bell *b) {
    if (!b) return;
    close(b->rfd);
    close(b->wfd);
    free(b);
}

/* ---------------------------------------------------------------- large copies
   A pull or push of tens of MB is a memcpy on each side; one core does not
   reach the memory's bandwidth, so a large copy is split over up to 4
   threads (as many as there are cores). */
typedef struct { void *dst; const void *src; size_t n; } copy_part;
static void *copy_main(void *a) { copy_part *p = a; memcpy(p->dst, p->src, p->n); return NULL; }

void ld_ps_shm_copy(void *dst, const void *src, size_t n) {
    if (n < ((size_t)8 << 20)) { memcpy(dst, src, n); return; }
    /* sysconf reads /sys/devices/system/cpu/online each time: asked once */
    static int cores_once;
    int cores = __atomic_load_n(&cores_once, __ATOMIC_RELAXED);
    if (!cores) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        cores = c < 1 ? 1 : c > 64 ? 64 : (int)c;
        __atomic_store_n(&cores_once, cores, __ATOMIC_RELAXED);
    }
    int k = cores < 2 ? 1 : cores > 4 ? 4 : cores;
    if (k < 2) { memcpy(dst, src, n); return; }
    size_t part = (n / (size_t)k + 4095) & ~(size_t)4095;
    copy_part parts[4];
    pthread_t th[4];
    int started[4] = {0};
    for (int i = 1; i < k; i++) {
        size_t at = part * (size_t)i;
        if (at >= n) break;
        parts[i] = (copy_part){(char *)dst + at, (const char *)src + at, at + part > n ? n - at : part};
        started[i] = pthread_create(&th[i], NULL, copy_main, &parts[i]) == 0;
        if (!started[i]) memcpy(parts[i].dst, parts[i].src, parts[i].n);
    }
    memcpy(dst, src, part < n ? part : n);
    for (int i = 1; i < k; i++) if (started[i]) pthread_join(th[i], NULL);
}
