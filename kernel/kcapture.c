/*
 * kcapture.c - everything written to fd 1 and 2 becomes `stream` messages.
 *
 * Lua's print and io.write, io.stderr:write, printf in C, a child started by
 * os.execute: all of them write to fd 1 or 2, which are pipes here. A reader
 * thread coalesces what arrives for up to COALESCE_S and publishes it for the
 * current parent. Before a result, an error or `idle`, the main thread calls
 * kcapture_flush: with the lock held (so the reader is not half-way through a
 * chunk) it drains the pipes itself, so every byte written before the flush
 * is published before whatever main sends next.
 *
 * Lock order: capture lock, then iopub lock (inside kpublish); never the
 * other way round.
 */
#define _GNU_SOURCE     /* pipe2, F_SETPIPE_SZ */
#include "kstate.h"
#include "ld_core.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COALESCE_S 0.02         /* seconds output may wait to be batched */
#define BATCH_MAX (64 * 1024)   /* bytes that trigger a send at once */

struct kcapture {
    kernel *K;
    int saved[2];               /* the original fd 1 and 2 */
    int rd[2];                  /* read ends of the stdout and stderr pipes */
    int stop[2];                /* self-pipe that ends the reader */
    pthread_t thread;
    pthread_mutex_t lock;
    struct {
        char *data;
        size_t len, cap;        /* bytes */
    } pend[2];
    double deadline;            /* monotonic seconds; 0 when nothing waits */
    int stale;                  /* the last send left an unfinished UTF-8 tail */
    json_t *parent;             /* owned */
    int silent;
};


/* Publish stream s; unless `all`, keep an unfinished UTF-8 tail for later. */
static void publish_locked(kcapture *C, int s, int all) {
    size_t n = all ? C->pend[s].len : kutf8_complete_prefix(C->pend[s].data, C->pend[s].len);
    if (n == 0) return;
    if (!C->silent) {
        json_t *content = json_pack("{s:s, s:o}", "name", s ? "stderr" : "stdout", "text",
                                    kjson_stringn(C->pend[s].data, n));
        kpublish(C->K, "stream", C->parent, content);
    }
    memmove(C->pend[s].data, C->pend[s].data + n, C->pend[s].len - n);
    C->pend[s].len -= n;
}

static void append_locked(kcapture *C, int s, const char *data, size_t n) {
    /* Interleaved stdout/stderr keep their order: the other stream goes first. */
    if (C->pend[!s].len) publish_locked(C, !s, 1);
    if (C->pend[s].len + n > C->pend[s].cap) {
        size_t cap = C->pend[s].cap ? C->pend[s].cap : 4096;
        while (cap < C->pend[s].len + n) cap *= 2;
        char *p = realloc(C->pend[s].data, cap);
        if (!p) return;                 /* drop output rather than the kernel */
        C->pend[s].data = p;
        C->pend[s].cap = cap;
    }
    memcpy(C->pend[s].data + C->pend[s].len, data, n);
    C->pend[s].len += n;
    if (C->pend[s].len >= BATCH_MAX) publish_locked(C, s, 0);
}

static void drain_locked(kcapture *C) {
    char buf[16384];
    for (int s = 0; s < 2; s++) {
        for (;;) {
            ssize_t n = read(C->rd[s], buf, sizeof buf);
            if (n > 0) append_locked(C, s, buf, (size_t)n);
            else if (n < 0 && errno == EINTR) continue;
            else break;
        }
    }
}

static void *reader_main(void *arg) {
    kcapture *C = arg;
    for (;;) {
        struct pollfd p[3] = {{C->rd[0], POLLIN, 0}, {C->rd[1], POLLIN, 0}, {C->stop[0], POLLIN, 0}};
        int timeout = -1;
        if (C->deadline > 0) {
            double left = C->deadline - ld_now();
            timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
        }
        int rc = poll(p, 3, timeout);
        if (rc < 0 && errno != EINTR) break;
        if (rc > 0 && p[2].revents) break;
        pthread_mutex_lock(&C->lock);
        if (rc > 0) drain_locked(C);
        int waiting = C->pend[0].len || C->pend[1].len;
        if (waiting && C->deadline == 0) C->deadline = ld_now() + COALESCE_S;
        if (waiting && ld_now() >= C->deadline) {
            publish_locked(C, 0, C->stale);
            publish_locked(C, 1, C->stale);
            C->stale = C->pend[0].len || C->pend[1].len;
            C->deadline = C->stale ? ld_now() + 5 * COALESCE_S : 0;
        }
        pthread_mutex_unlock(&C->lock);
    }
    return NULL;
}

int kcapture_start(kernel *K) {
    kcapture *C = calloc(1, sizeof *C);
    if (!C) return -1;
    C->K = K;
    C->parent = json_object();
    pthread_mutex_init(&C->lock, NULL);
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    C->stop[0] = C->stop[1] = -1;
    C->saved[0] = dup(1);
    C->saved[1] = dup(2);
    if (C->saved[0] < 0 || C->saved[1] < 0 || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) ||
        pipe2(C->stop, O_CLOEXEC))
        goto fail;
    fflush(stdout);
    fflush(stderr);
    for (int s = 0; s < 2; s++) {
        int *p = s ? err : out;
        fcntl(p[0], F_SETFL, O_NONBLOCK);
        fcntl(p[0], F_SETPIPE_SZ, 1 << 20);  /* fewer stalls for chatty code; may fail */
        C->rd[s] = p[0];
    }
    if (dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0) goto fail;
    close(out[1]);
    close(err[1]);
    out[1] = err[1] = -1;
    /* As on a terminal: stdout by lines, stderr unbuffered. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
    if (pthread_create(&C->thread, NULL, reader_main, C) != 0) {
        dup2(C->saved[0], 1);
        dup2(C->saved[1], 2);
        goto fail;
    }
    K->capture = C;
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0) close(out[i]);
        if (err[i] >= 0) close(err[i]);
        if (C->stop[i] >= 0) close(C->stop[i]);
        if (C->saved[i] >= 0) close(C->saved[i]);
    }
    json_decref(C->parent);
    free(C);
    return -1;
}

void kcapture_flush(kernel *K) {
    kcapture *C = K->capture;
    fflush(stdout);
    fflush(stderr);
    if (!C) return;
    pthread_mutex_lock(&C->lock);
    drain_locked(C);
    publish_locked(C, 0, 1);
    publish_locked(C, 1, 1);
    C->deadline = 0;
    C->stale = 0;
    pthread_mutex_unlock(&C->lock);
}

void kcapture_set_parent(kernel *K, json_t *parent, int silent) {
    kcapture *C = K->capture;
    kcapture_flush(K);
    if (!C) return;
    pthread_mutex_lock(&C->lock);
    json_decref(C->parent);
    C->parent = parent ? json_incref(parent) : json_object();
    C->silent = silent;
    pthread_mutex_unlock(&C->lock);
}

void kcapture_stop(kernel *K) {
    kcapture *C = K->capture;
    if (!C) return;
    kcapture_flush(K);
    ssize_t w = write(C->stop[1], "x", 1);
    (void)w;
    pthread_join(C->thread, NULL);
    K->capture = NULL;
    dup2(C->saved[0], 1);
    dup2(C->saved[1], 2);
    for (int i = 0; i < 2; i++) {
        close(C->saved[i]);
        close(C->rd[i]);
        close(C->stop[i]);
        free(C->pend[i].data);
    }
    json_decref(C->parent);
    pthread_mutex_destroy(&C->lock);
    free(C);
}
