/*
 * kwire.h - the Jupyter wire protocol (messaging 5.3): decoding, signing and
 * encoding of multipart messages, with no sockets and no Lua in sight, so the
 * parser can be fuzzed on its own (tests/kernel/fuzz_wire.c).
 *
 * A message on the wire is a list of frames:
 *
 *     ident... "<IDS|MSG>" signature header parent_header metadata content buffer...
 *
 * `signature` is the hex HMAC of the four JSON frames that follow it, keyed by
 * the connection file's key; an empty key means "no signing" (signature "").
 *
 *     ksigner s; ksigner_init(&s, "hmac-sha256", key, keylen);
 *     kmsg m;    if (kmsg_decode(&s, frames, n, &m, err, sizeof err) == KWIRE_OK) ...
 *     kmsg_free(&m);
 */
#ifndef LDIST_KWIRE_H
#define LDIST_KWIRE_H

#include <jansson.h>
#include <stddef.h>

#define KWIRE_DELIM "<IDS|MSG>"
#define KWIRE_PROTOCOL_VERSION "5.3"

typedef struct {
    const void *data;
    size_t len;         /* bytes */
} kframe;

typedef struct {
    char *data;         /* owned, NUL-terminated for convenience */
    size_t len;         /* bytes, not counting the NUL */
} kbuf;

typedef enum {
    KWIRE_OK = 0,
    KWIRE_EFRAMES,      /* no delimiter, or fewer than the 5 frames after it */
    KWIRE_ESIG,         /* the signature does not match: never act on it */
    KWIRE_EJSON,        /* a JSON frame does not parse or is not an object */
    KWIRE_EHEADER,      /* header lacks msg_id / msg_type strings */
} kwire_status;

typedef struct {
    const void *md;     /* EVP_MD of the scheme; NULL when the key is empty */
    unsigned char *key; /* owned */
    size_t keylen;      /* bytes */
} ksigner;

typedef struct {
    kbuf *ids;          /* routing identities, owned */
    size_t nids;
    json_t *header, *parent, *metadata, *content;   /* owned references */
    kbuf *buffers;      /* extra binary frames, owned */
    size_t nbuffers;
    const char *msg_type;   /* borrowed from header */
    const char *msg_id;     /* borrowed from header */
    unsigned char digest[32];   /* the first 32 bytes of its verified MAC (for ksighist) */
    int is_signed;              /* digest is set: signing is on and the MAC matched */
} kmsg;

/* The signatures of messages already accepted, so a captured message sent
   again is refused (jupyter_client's Session keeps the same history). Two
   generations of open-addressed tables: when the newer fills, the older is
   dropped, so the last KSIGHIST_GEN to 2*KSIGHIST_GEN digests are remembered
   in bounded memory (2 MiB, touched only as it fills). Not thread-safe. */
#define KSIGHIST_GEN 16384          /* digests per generation */
typedef struct {
    unsigned char (*gen[2])[32];    /* 2*KSIGHIST_GEN slots each; all-zero = empty */
    size_t count;                   /* digests in gen[0], the newer */
} ksighist;

/* 1 when digest was seen before (the message is a replay), else record it
   and return 0; -1 when out of memory (nothing recorded: refuse the message). */
int ksighist_check(ksighist *h, const unsigned char digest[32]);
void ksighist_free(ksighist *h);

/* scheme is "hmac-sha256" (or any "hmac-<digest>" OpenSSL knows). Returns 0,
   or -1 for an unknown scheme. An empty key disables signing. */
int ksigner_init(ksigner *s, const char *scheme, const char *key, size_t keylen);
void ksigner_free(ksigner *s);
/* Hex signature of the four parts into hex (at least 129 bytes); "" when
   signing is off. */
void ksigner_sign(const ksigner *s, const kframe parts[4], char *hex);

/* Decode frames into m (which owns copies of everything it needs; frames may
   be freed afterwards). On failure m is left empty and err says why. */
kwire_status kmsg_decode(const ksigner *s, const kframe *frames, size_t n, kmsg *m,
                         char *err, size_t errlen);
void kmsg_free(kmsg *m);

/* A new header object for an outgoing message. */
json_t *kwire_header(const char *msg_type, const char *session, const char *username);
/* Serialise header/parent/metadata/content (borrowed) into four owned strings
   (free with free()) plus the signature. Returns 0, or -1 when a part does
   not serialise (out of memory). */
int kwire_encode(const ksigner *s, json_t *header, json_t *parent, json_t *metadata,
                 json_t *content, char *parts[4], size_t lens[4], char *hex);

/* ---- text helpers ------------------------------------------------------- */
/* A JSON string from bytes that may not be UTF-8: bad sequences become U+FFFD. */
json_t *kjson_stringn(const char *s, size_t n);
/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8
   sequence that could still be completed by more bytes. */
size_t kutf8_complete_prefix(const char *s, size_t n);
/* Code point offset <-> byte offset in a UTF-8 string of n bytes (clamped). */
size_t kutf8_cp_to_byte(const char *s, size_t n, size_t cp);
size_t kutf8_byte_to_cp(const char *s, size_t n, size_t byte);
/* A fresh random UUID as 36 characters plus NUL. */
void kwire_uuid(char out[37]);
/* ISO 8601 UTC time with microseconds, e.g. 2024-05-01T12:00:00.123456Z. */
void kwire_now(char out[40]);

#endif
