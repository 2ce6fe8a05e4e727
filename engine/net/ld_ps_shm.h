/* ld_ps_shm.h - the parameter server's shared-memory link between a client
   (the coordinator or a worker) and a ps task on the same host (ld_ps_shm.c). */
#ifndef LD_PS_SHM_H
#define LD_PS_SHM_H

#include <stddef.h>

typedef struct ld_ps_shm ld_ps_shm;

/* A new segment of `bytes` data bytes under an unguessable name (mode 0600),
   its header holding a random tag; NULL (with ld_error set) when this host
   has no usable /dev/shm. */
ld_ps_shm *ld_ps_shm_create(size_t bytes);
/* The segment `name` made by a client on this host, when its tag (64 hex
   digits) and size match; the name is unlinked at once (the mapping stays).
   NULL when it is not there (another host) or does not match. */
ld_ps_shm *ld_ps_shm_open(const char *name, const char *tag_hex, size_t bytes);
const char *ld_ps_shm_name(const ld_ps_shm *s);
const char *ld_ps_shm_tag(const ld_ps_shm *s);     /* 64 hex digits */
size_t ld_ps_shm_size(const ld_ps_shm *s);         /* data bytes */
unsigned char *ld_ps_shm_data(ld_ps_shm *s);
void ld_ps_shm_unlink(ld_ps_shm *s);               /* idempotent */
void ld_ps_shm_close(ld_ps_shm *s);                /* unlinks (if still linked) and unmaps; NULL is fine */
/* A reference for a tensor viewing the data: the mapping stays until the
   owner's ld_ps_shm_close and one ld_ps_shm_release per retain. */
void ld_ps_shm_retain(ld_ps_shm *s);
void ld_ps_shm_release(ld_ps_shm *s);

/* The mailbox (requests and answers without the control plane, once the ps
   has mapped the segment and written its doorbell's path there). Client:
   post -> 0 sent, -1 not possible now (use the control plane); wait -> 1
   (the answer, valid until the next post), 0 timeout, -1 error. ps: take ->
   1 a request (valid until the answer), 0 none, -1 malformed; answer. */
int ld_ps_shm_room(ld_ps_shm *s);               /* requests that can be posted now (0: no mailbox yet) */
size_t ld_ps_shm_msg_max(void);                 /* the largest body a slot takes */
int ld_ps_shm_post(ld_ps_shm *s, const char *type, const void *body, size_t n);
int ld_ps_shm_wait(ld_ps_shm *s, double timeout, char type[32], const void **body, size_t *n);
int ld_ps_shm_take(ld_ps_shm *s, char type[32], const void **body, size_t *n);
int ld_ps_shm_answer(ld_ps_shm *s, const char *type, const void *body, size_t n);
void ld_ps_shm_set_bell(ld_ps_shm *s, const char *path);
/* The client's own doorbell (a client waiting on several segments, as the
   coordinator on its workers' task links): the other end writes a byte
   there after each answer. */
void ld_ps_shm_set_client_bell(ld_ps_shm *s, const char *path);

/* memcpy, split over a few threads when it is large (tens of MB) */
void ld_ps_shm_copy(void *dst, const void *src, size_t n);

/* The ps's doorbell: a pipe, its write end reachable at /proc/<pid>/fd/<n>. */
typedef struct ld_ps_bell ld_ps_bell;
ld_ps_bell *ld_ps_bell_create(void);          /* NULL: none (the clients keep the control plane) */
const char *ld_ps_bell_path(const ld_ps_bell *b);
int ld_ps_bell_fd(const ld_ps_bell *b);
void ld_ps_bell_drain(ld_ps_bell *b);
void ld_ps_bell_close(ld_ps_bell *b);         /* NULL is fine */

#endif
