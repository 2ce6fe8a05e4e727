/*
 * fuzz_wire.c - libFuzzer target for the kernel's message parser (kwire.c).
 *
 * Input layout: byte 0 picks a mode, the rest is frames separated by NUL.
 *   bit 0: a key is set (messages must be signed)
 *   bit 1: the harness signs the 4 frames after "<IDS|MSG>" itself, so the
 *          JSON parsing behind a valid signature gets fuzzed too
 * Every decoded message is encoded again and decoded again: the second decode
 * must succeed and give the same JSON (a round-trip property, not only "no
 * crash"). The UTF-8 helpers run on the raw bytes as well.
 *
 * Build and run: tests/kernel/fuzz.sh [seconds]
 */
#include "kwire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FRAMES 64

static void check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_wire: property failed: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    data++, size--;

    /* the UTF-8 helpers on arbitrary bytes */
    json_t *s = kjson_stringn((const char *)data, size);
    check(s != NULL, "kjson_stringn returns a string");
    check(kutf8_complete_prefix((const char *)data, size) <= size, "prefix within bounds");
    int valid = json_string_length(s) == size && !memcmp(json_string_value(s), data, size);
    if (valid) {    /* what JSON strings always are: offsets convert both ways */
        for (size_t b = 0; b <= size; b++) {
            if (b < size && (data[b] & 0xC0) == 0x80) continue;    /* inside a character */
            size_t cp = kutf8_byte_to_cp((const char *)data, size, b);
            check(kutf8_cp_to_byte((const char *)data, size, cp) == b, "cp/byte round trip");
        }
    }
    check(kutf8_cp_to_byte((const char *)data, size, (size_t)-1) == size, "cp clamps to the end");
    json_decref(s);

    kframe frames[MAX_FRAMES];
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= size && n < MAX_FRAMES; i++) {
        if (i == size || data[i] == 0) {
            frames[n].data = data + start;
            frames[n].len = i - start;
            n++;
            start = i + 1;
        }
    }
    ksigner signer;
    static const char key[] = "fuzz-key";
    ksigner_init(&signer, "hmac-sha256", key, (mode & 1) ? sizeof key - 1 : 0);

    char hex[129];
    kframe work[MAX_FRAMES + 1];
    memcpy(work, frames, n * sizeof *work);
    if (mode & 2) {     /* sign the four frames after the delimiter ourselves */
        for (size_t d = 0; d + 5 < n; d++) {
            if (frames[d].len == 9 && !memcmp(frames[d].data, "<IDS|MSG>", 9)) {
                ksigner_sign(&signer, &frames[d + 2], hex);
                work[d + 1].data = hex;
                work[d + 1].len = strlen(hex);
                break;
            }
        }
    }

    kmsg m;
    char err[160];
    if (kmsg_decode(&signer, work, n, &m, err, sizeof err) == KWIRE_OK) {
        char *parts[4];
        size_t lens[4];
        check(kwire_encode(&signer, m.header, m.parent, m.metadata, m.content, parts, lens, hex) == 0,
              "encode a decoded message");
        kframe again[6] = {{"<IDS|MSG>", 9}, {hex, strlen(hex)}};
        for (int i = 0; i < 4; i++) again[2 + i] = (kframe){parts[i], lens[i]};
        kmsg m2;
        check(kmsg_decode(&signer, again, 6, &m2, err, sizeof err) == KWIRE_OK, "decode what we encoded");
        check(json_equal(m.header, m2.header) && json_equal(m.content, m2.content) &&
                  json_equal(m.parent, m2.parent) && json_equal(m.metadata, m2.metadata),
              "round trip keeps the JSON");
        check(!strcmp(m.msg_type, m2.msg_type), "round trip keeps msg_type");
        kmsg_free(&m2);
        for (int i = 0; i < 4; i++) free(parts[i]);
        kmsg_free(&m);
    }
    ksigner_free(&signer);
    return 0;
}
