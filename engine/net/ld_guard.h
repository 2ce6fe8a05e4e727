/*
 * ld_guard.h - bounds on what peers that have not authenticated may hold.
 *
 * ZeroMQ reads a frame whole before the application sees it, and a signature
 * (the kernel's HMAC, the cluster's handshake) can be checked only on whole
 * messages, so a stranger who connects can make the process hold a partial
 * frame of up to ZMQ_MAXMSGSIZE bytes per connection. A guard bounds that in
 * total: it learns connections from a socket monitor (ACCEPTED, DISCONNECTED,
 * CLOSED events), is told which ones delivered an authenticated message
 * (ld_guard_trust with the message's ZMQ_SRCFD), and sheds untrusted ones
 * (shutdown() of their descriptor; ZeroMQ then closes the connection and
 * frees what it held) when
 *  - more than max_conns untrusted connections are open (the oldest goes, or
 *    the newest when shed_newest: long-lived unauthenticated connections such
 *    as Jupyter's heartbeat are then kept), or
 *  - the untrusted connections have received more than max_bytes in all
 *    (TCP_INFO's bytes_received; the largest goes first).
 * ld_guard_enforce must be called every few tens of milliseconds.
 *
 *     ld_guard *g = ld_guard_new("shell, control and stdin", 8, 64 << 20, 0, NULL, NULL);
 *     zmq_socket_monitor(sock, "inproc://mon", LD_GUARD_EVENTS);  // events -> ld_guard_event
 *     ld_guard_trust(g, zmq_msg_get(&first_frame, ZMQ_SRCFD));    // after a good signature
 */
#ifndef LD_GUARD_H
#define LD_GUARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct ld_guard ld_guard;

#define LD_GUARD_EVENTS (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED)

/* A line for the log (at a bounded rate: strangers cause them). */
typedef void (*ld_guard_log_fn)(void *ud, const char *line);
/* what: named in the log lines; max_bytes < 0: no byte limit; log NULL: the
   cluster's rate-limited log */
ld_guard *ld_guard_new(const char *what, int max_conns, int64_t max_bytes, int shed_newest, ld_guard_log_fn log, void *ud);
void ld_guard_free(ld_guard *g);
/* The first frame of a monitor event (libzmq 4: u16 event, u32 value). */
void ld_guard_event(ld_guard *g, const void *frame, size_t n);
void ld_guard_accepted(ld_guard *g, int fd);
void ld_guard_closed(ld_guard *g, int fd);
/* fd delivered an authenticated message: no limit applies to it any more. */
void ld_guard_trust(ld_guard *g, int fd);
/* Shed what is over the limits; returns how many connections were shed. */
int ld_guard_enforce(ld_guard *g);
/* Untrusted connections open now, and the bytes they received. */
int ld_guard_untrusted(ld_guard *g, int64_t *bytes);

#endif
