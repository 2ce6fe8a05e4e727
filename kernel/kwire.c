/*
 * kwire.c - Jupyter wire protocol: signatures, decoding, encoding, UTF-8.
 * See kwire.h. Nothing here touches a socket or Lua.
 */
#include "kwire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <uuid/uuid.h>

/* ---- signing ------------------------------------------------------------ */

int ksigner_init(ksigner *s, const char *scheme, const char *key, size_t keylen) {
    memset(s, 0, sizeof *s);
    if (!key || keylen == 0) return 0;            /* no signing, as the spec says */
    if (!scheme || !*scheme) scheme = "hmac-sha256";
    if (strncasecmp(scheme, "hmac-", 5) != 0) return -1;
    const EVP_MD *md = EVP_get_digestbyname(scheme + 5);
    if (!md) return -1;
    s->key = malloc(keylen);
    if (!s->key) return -1;
    memcpy(s->key, key, keylen);
    s->keylen = keylen;
    s->md = md;
    return 0;
}

void ksigner_free(ksigner *s) {
    if (s->key) {
        OPENSSL_cleanse(s->key, s->keylen);
        free(s->key);
    }
    memset(s, 0, sizeof *s);
}

/* The digest of the four parts, into mac; returns its length (0 when off). */
static unsigned mac_parts(const ksigner *s, const kframe parts[4], unsigned char *mac) {
    if (!s->md) return 0;
    size_t total = 0;
    for (int i = 0; i < 4; i++) total += parts[i].len;
    /* One-shot HMAC over a joined copy: HMAC() is the one HMAC entry point of
       OpenSSL 3 that is neither deprecated nor needs a provider fetch, and the
       copy costs less than a fetch for the message sizes Jupyter sends. */
    unsigned char stackbuf[4096], *buf = total <= sizeof stackbuf ? stackbuf : malloc(total);
    if (!buf) return 0;
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        if (parts[i].len) memcpy(buf + off, parts[i].data, parts[i].len);
        off += parts[i].len;
    }
    unsigned len = 0;
    if (!HMAC(s->md, s->key, (int)s->keylen, buf, total, mac, &len)) len = 0;
    if (buf != stackbuf) free(buf);
    return len;
}

void ksigner_sign(const ksigner *s, const kframe parts[4], char *hex) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned len = mac_parts(s, parts, mac);
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < len; i++) {
        hex[2 * i] = digits[mac[i] >> 4];
        hex[2 * i + 1] = digits[mac[i] & 15];
    }
    hex[2 * len] = 0;
}

/* ---- decoding ----------------------------------------------------------- */

static int kbuf_set(kbuf *b, const void *data, size_t len) {
    b->data = malloc(len + 1);
    if (!b->data) return -1;
    if (len) memcpy(b->data, data, len);
    b->data[len] = 0;
    b->len = len;
    return 0;
}

void kmsg_free(kmsg *m) {
    for (size_t i = 0; i < m->nids; i++) free(m->ids[i].data);
    for (size_t i = 0; i < m->nbuffers; i++) free(m->buffers[i].data);
    free(m->ids);
    free(m->buffers);
    json_decref(m->header);
    json_decref(m->parent);
    json_decref(m->metadata);
    json_decref(m->content);
    memset(m, 0, sizeof *m);
}

/* err gets "<part><what>" (part may be NULL). */
static kwire_status fail(kmsg *m, kwire_status st, char *err, size_t errlen, const char *part,
                         const char *what) {
    if (err && errlen) snprintf(err, errlen, "%s%s", part ? part : "", what);
    kmsg_free(m);
    return st;
}

kwire_status kmsg_decode(const ksigner *s, const kframe *frames, size_t n, kmsg *m, char *err,
                         size_t errlen) {
    static const char *const names[4] = {"header", "parent_header", "metadata", "content"};
    memset(m, 0, sizeof *m);
    size_t d = 0;
    while (d < n && !(frames[d].len == sizeof KWIRE_DELIM - 1 &&
                      memcmp(frames[d].data, KWIRE_DELIM, sizeof KWIRE_DELIM - 1) == 0))
        d++;
    if (d == n) return fail(m, KWIRE_EFRAMES, err, errlen, NULL, "no <IDS|MSG> delimiter");
    if (n - d < 6)
        return fail(m, KWIRE_EFRAMES, err, errlen, NULL, "fewer than 5 frames after the delimiter");

    const kframe *sig = &frames[d + 1], *parts = &frames[d + 2];
    if (s->md) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned len = mac_parts(s, parts, mac);
        unsigned char got[EVP_MAX_MD_SIZE];
        int ok = len > 0 && sig->len == 2 * (size_t)len;
        /* Decode the hex in full whatever happens, then compare in constant time. */
        for (unsigned i = 0; ok && i < len; i++) {
            const unsigned char *h = (const unsigned char *)sig->data + 2 * i;
            int v = 0;
            for (int k = 0; k < 2; k++) {
                int c = h[k], x = c >= '0' && c <= '9' ? c - '0'
                                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                if (x < 0) ok = 0;
                v = v * 16 + (x < 0 ? 0 : x);
            }
            got[i] = (unsigned char)v;
        }
        if (!ok || CRYPTO_memcmp(got, mac, len) != 0)
            return fail(m, KWIRE_ESIG, err, errlen, NULL, "bad message signature");
        memcpy(m->digest, got, len < 32 ? len : 32);
        m->is_signed = 1;
    }

    json_t **slots[4] = {&m->header, &m->parent, &m->metadata, &m->content};
    for (int i = 0; i < 4; i++) {
        json_error_t je;
        json_t *j = json_loadb(parts[i].data, parts[i].len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
        if (!j || !json_is_object(j)) {
            json_decref(j);
            return fail(m, KWIRE_EJSON, err, errlen, names[i], " is not a JSON object");
        }
        *slots[i] = j;
    }
    m->msg_type = json_string_value(json_object_get(m->header, "msg_type"));
    m->msg_id = json_string_value(json_object_get(m->header, "msg_id"));
    if (!m->msg_type || !m->msg_id)
        return fail(m, KWIRE_EHEADER, err, errlen, NULL, "header lacks msg_type or msg_id");

    m->nids = d;
    m->ids = d ? calloc(d, sizeof *m->ids) : NULL;
    size_t nb = n - d - 6;
    m->buffers = nb ? calloc(nb, sizeof *m->buffers) : NULL;
    if ((d && !m->ids) || (nb && !m->buffers))
        return fail(m, KWIRE_EFRAMES, err, errlen, NULL, "out of memory");
    for (size_t i = 0; i < d; i++)
        if (kbuf_set(&m->ids[i], frames[i].data, frames[i].len))
            return fail(m, KWIRE_EFRAMES, err, errlen, NULL, "out of memory");
    for (size_t i = 0; i < nb; i++) {
        if (kbuf_set(&m->buffers[i], frames[d + 6 + i].data, frames[d + 6 + i].len))
            return fail(m, KWIRE_EFRAMES, err, errlen, NULL, "out of memory");
        m->nbuffers++;
    }
    return KWIRE_OK;
}

/* ---- replay history ----------------------------------------------------- */

static size_t sighist_slot(const unsigned char (*t)[32], const unsigned char d[32], int *found) {
    size_t mask = 2 * KSIGHIST_GEN - 1, i;
    memcpy(&i, d, sizeof i);          /* a MAC's bytes are already uniform */
    for (i &= mask;; i = (i + 1) & mask) {
        if (!memcmp(t[i], d, 32)) { *found = 1; return i; }
        static const unsigned char zero[32];
        if (!memcmp(t[i], zero, 32)) { *found = 0; return i; }
    }
}

int ksighist_check(ksighist *h, const unsigned char digest[32]) {
    int found;
    for (int g = 0; g < 2; g++) {
        if (!h->gen[g]) continue;
        sighist_slot((const unsigned char (*)[32])h->gen[g], digest, &found);
        if (found) return 1;
    }
    if (h->count >= KSIGHIST_GEN || !h->gen[0]) {
        /* the newer generation is full (load 1/2): it becomes the older */
        free(h->gen[1]);
        h->gen[1] = h->gen[0];
        h->gen[0] = calloc(2 * KSIGHIST_GEN, 32);
        h->count = 0;
        if (!h->gen[0]) return -1;
    }
    size_t i = sighist_slot((const unsigned char (*)[32])h->gen[0], digest, &found);
    memcpy(h->gen[0][i], digest, 32);
    h->count++;
    return 0;
}

void ksighist_free(ksighist *h) {
    free(h->gen[0]);
    free(h->gen[1]);
    memset(h, 0, sizeof *h);
}

/* ---- encoding ----------------------------------------------------------- */

void kwire_uuid(char out[37]) {
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, out);
}

void kwire_now(char out[40]) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, 40 - k, ".%06ldZ", ts.tv_nsec / 1000);
}

json_t *kwire_header(const char *msg_type, const char *session, const char *username) {
    char id[37], date[40];
    kwire_uuid(id);
    kwire_now(date);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", id, "msg_type", msg_type,
                     "session", session, "username", username, "date", date, "version",
                     KWIRE_PROTOCOL_VERSION);
}

int kwire_encode(const ksigner *s, json_t *header, json_t *parent, json_t *metadata,
                 json_t *content, char *parts[4], size_t lens[4], char *hex) {
    json_t *objs[4] = {header, parent, metadata, content};
    kframe fr[4];
    for (int i = 0; i < 4; i++) {
        json_t *empty = NULL;
        if (!objs[i]) objs[i] = empty = json_object();
        parts[i] = json_dumps(objs[i], JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(empty);
        if (!parts[i]) {
            for (int k = 0; k < i; k++) free(parts[k]);
            return -1;
        }
        lens[i] = strlen(parts[i]);
        fr[i].data = parts[i];
        fr[i].len = lens[i];
    }
    ksigner_sign(s, fr, hex);
    return 0;
}

/* ---- UTF-8 -------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid; sets
   *partial when the bytes are a valid but truncated beginning. */
static size_t utf8_seq(const unsigned char *s, size_t n, int *partial) {
    unsigned c = s[0];
    size_t len;
    unsigned min;
    *partial = 0;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    unsigned cp = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if (i >= n) {
            *partial = 1;
            return 0;
        }
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
        /* reject overlong and surrogate prefixes as early as possible */
        if (i == 1 && len == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F))) return 0;
        if (i == 1 && len == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))) return 0;
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

json_t *kjson_stringn(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    int partial;
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i, &partial);
        if (!k) break;
        i += k;
    }
    if (i == n) return json_stringn_nocheck(str, n);
    /* Repair: each bad byte becomes U+FFFD (3 bytes), so 3n is always enough. */
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    memcpy(out, str, i);
    size_t o = i;
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i, &partial);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += 1;
        }
    }
    json_t *j = json_stringn_nocheck(out, o);
    free(out);
    return j;
}

size_t kutf8_complete_prefix(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    /* Only the last 3 bytes can start an unfinished sequence. */
    size_t start = n > 3 ? n - 3 : 0;
    for (size_t i = start; i < n; i++) {
        if (s[i] < 0xC2 || s[i] > 0xF4) continue;
        int partial;
        if (!utf8_seq(s + i, n - i, &partial) && partial) return i;
    }
    return n;
}

size_t kutf8_cp_to_byte(const char *str, size_t n, size_t cp) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n && cp > 0) {
        i++;
        while (i < n && (s[i] & 0xC0) == 0x80) i++;
        cp--;
    }
    return i;
}

size_t kutf8_byte_to_cp(const char *str, size_t n, size_t byte) {
    const unsigned char *s = (const unsigned char *)str;
    size_t cp = 0;
    if (byte > n) byte = n;
    for (size_t i = 0; i < byte; i++)
        if ((s[i] & 0xC0) != 0x80) cp++;
    return cp;
}
