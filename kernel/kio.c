/*
 * kio.c - the kernel's Lua side: input through the stdin channel, help as a
 * pager, rich display, comms, and Lua <-> JSON.
 *
 * io.read, io.lines(), io.stdin:read/lines and io.input() keep Lua's meaning,
 * but the bytes come from the front end: each time a line is needed the
 * kernel sends `input_request` and waits for `input_reply` (its value plus a
 * newline is what a terminal would have given). Every format works: "n",
 * "l", "L", "a" (what has been typed: one line when nothing is pending) and
 * byte counts. When the front end does not allow stdin, reading raises
 * "input is not available: the front end does not allow stdin".
 *
 * The display and comm logic lives in Lua (lua_bindings/lua/ui/display.lua);
 * here are the backends it calls: ldist.display.backend(kind, x, opts) and
 * ldist.comm.backend(msg_type, content, metadata).
 */
#include "kstate.h"
#include "ldist.h"

#include <lauxlib.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KSTDIN_MT "ldist.KernelStdin"
#define NOT_ALLOWED "input is not available: the front end does not allow stdin"

static kernel *getK(lua_State *L) { return lua_touserdata(L, lua_upvalueindex(1)); }

int kio_push_ldist(lua_State *L) {
    if (lua_getglobal(L, "ldist") == LUA_TTABLE) return LUA_TTABLE;
    lua_pop(L, 1);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "ldist");
    lua_remove(L, -2);
    return lua_type(L, -1);
}

/* ---- Lua <-> JSON ------------------------------------------------------- */

json_t *kio_tojson(lua_State *L, int idx, int depth) {
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return json_null();
    case LUA_TBOOLEAN: return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) return json_integer((json_int_t)lua_tointeger(L, idx));
        else {
            double d = lua_tonumber(L, idx);
            return isfinite(d) ? json_real(d) : json_null();
        }
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        return kjson_stringn(s, n);
    }
    case LUA_TTABLE: {
        if (depth > 64 || !lua_checkstack(L, 4)) return json_null();
        size_t len = lua_rawlen(L, idx), count = 0;
        lua_pushnil(L);
        while (lua_next(L, idx)) count++, lua_pop(L, 1);
        if (len > 0 && count == len) {
            json_t *a = json_array();
            for (size_t i = 1; i <= len; i++) {
                lua_rawgeti(L, idx, (lua_Integer)i);
                json_array_append_new(a, kio_tojson(L, -1, depth + 1));
                lua_pop(L, 1);
            }
            return a;
        }
        json_t *o = json_object();
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            lua_pushvalue(L, -2);   /* a copy: tolstring must not change the key */
            size_t kn;
            const char *k = lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER
                                ? lua_tolstring(L, -1, &kn) : NULL;
            if (k) {
                json_t *key = kjson_stringn(k, kn);     /* keys must be UTF-8 too */
                json_object_setn_new_nocheck(o, json_string_value(key), json_string_length(key),
                                             kio_tojson(L, -2, depth + 1));
                json_decref(key);
            }
            lua_pop(L, 2);
        }
        return o;
    }
    default: {
        ldist_repr(L, idx);
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        json_t *j = kjson_stringn(s, n);
        lua_pop(L, 1);
        return j;
    }
    }
}

void kio_pushjson(lua_State *L, json_t *j) {
    luaL_checkstack(L, 4, "JSON too deep");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *v;
        lua_createtable(L, 0, (int)json_object_size(j));
        json_object_foreach(j, k, v) {
            if (json_is_null(v)) continue;
            kio_pushjson(L, v);
            lua_setfield(L, -2, k);
        }
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *v;
        lua_createtable(L, (int)json_array_size(j), 0);
        json_array_foreach(j, i, v) {
            kio_pushjson(L, v);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    }
    case JSON_STRING: lua_pushlstring(L, json_string_value(j), json_string_length(j)); break;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(j)); break;
    case JSON_REAL: lua_pushnumber(L, json_real_value(j)); break;
    case JSON_TRUE: lua_pushboolean(L, 1); break;
    case JSON_FALSE: lua_pushboolean(L, 0); break;
    default: lua_pushnil(L); break;
    }
}

/* A whole message as Lua sees it in comm handlers (like ipykernel's dict). */
static void push_msg(lua_State *L, const kmsg *m) {
    lua_createtable(L, 0, 6);
    kio_pushjson(L, m->header);
    lua_setfield(L, -2, "header");
    kio_pushjson(L, m->parent);
    lua_setfield(L, -2, "parent_header");
    kio_pushjson(L, m->metadata);
    lua_setfield(L, -2, "metadata");
    kio_pushjson(L, m->content);
    lua_setfield(L, -2, "content");
    lua_pushstring(L, m->msg_type);
    lua_setfield(L, -2, "msg_type");
    lua_createtable(L, (int)m->nbuffers, 0);
    for (size_t i = 0; i < m->nbuffers; i++) {
        lua_pushlstring(L, m->buffers[i].data, m->buffers[i].len);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "buffers");
}

/* ---- mime bundles ------------------------------------------------------- */

static int is_binary_mime(const char *mime) {
    return !strncmp(mime, "image/", 6) && strcmp(mime, "image/svg+xml") != 0;
}

/* A mime value: strings as they are (binary images base64-encoded, as the
   notebook format wants), tables as JSON. */
static json_t *mime_value(lua_State *L, int idx, const char *mime) {
    if (lua_type(L, idx) == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        int png = n >= 4 && !memcmp(s, "\x89PNG", 4), jpg = n >= 2 && !memcmp(s, "\xff\xd8", 2);
        if (is_binary_mime(mime) && (png || jpg || (n >= 4 && !memcmp(s, "GIF8", 4)))) {
            unsigned char *b64 = malloc(4 * ((n + 2) / 3) + 1);
            if (!b64) return json_null();
            int k = EVP_EncodeBlock(b64, (const unsigned char *)s, (int)n);
            json_t *j = json_stringn((const char *)b64, (size_t)k);
            free(b64);
            return j;
        }
        return kjson_stringn(s, n);
    }
    return kio_tojson(L, idx, 0);
}

/* Merge a Lua table of mime -> value at idx into data. */
static void merge_bundle(lua_State *L, int idx, json_t *data) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TTABLE) return;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *mime = lua_tostring(L, -2);
            if (strchr(mime, '/')) json_object_set_new(data, mime, mime_value(L, -1, mime));
        }
        lua_pop(L, 1);
    }
}

json_t *kio_mimebundle(kernel *K, int idx, json_t **metadata) {
    lua_State *L = K->L;
    idx = lua_absindex(L, idx);
    json_t *data = json_object(), *md = json_object();
    size_t n;
    ldist_repr(L, idx);
    const char *text = lua_tolstring(L, -1, &n);
    json_object_set_new(data, "text/plain", kjson_stringn(text ? text : "", text ? n : 0));
    lua_pop(L, 1);
    if (luaL_getmetafield(L, idx, "__mimebundle") != LUA_TNIL) {
        lua_pushvalue(L, idx);
        if (lua_pcall(L, 1, 2, 0) == LUA_OK) {
            merge_bundle(L, -2, data);
            if (lua_type(L, -1) == LUA_TTABLE) {
                json_t *m = kio_tojson(L, -1, 0);
                if (json_is_object(m)) json_object_update(md, m);
                json_decref(m);
            }
            lua_pop(L, 2);
        } else {
            fprintf(stderr, "__mimebundle failed: %s\n", lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    }
    *metadata = md;
    return data;
}

/* ---- display backend ---------------------------------------------------- */

static json_t *parent_of(kernel *K) { return K->cur ? K->cur->header : NULL; }

/* ldist.display.backend(kind, x, opts): kind "display", "update" or "clear";
   opts.raw (x is already a bundle), opts.metadata, opts.display_id, opts.wait. */
static int display_backend(lua_State *L) {
    kernel *K = getK(L);
    const char *kind = luaL_checkstring(L, 1);
    if (lua_type(L, 3) != LUA_TTABLE) {
        lua_settop(L, 2);
        lua_newtable(L);
    }
    if (K->silent) return 0;
    kcapture_flush(K);              /* what was printed before comes first */
    json_t *parent = parent_of(K);
    if (!strcmp(kind, "clear")) {
        lua_getfield(L, 3, "wait");
        kpublish(K, "clear_output", parent, json_pack("{s:b}", "wait", lua_toboolean(L, -1)));
        return 0;
    }
    int update = !strcmp(kind, "update");
    if (!update && strcmp(kind, "display"))
        return luaL_argerror(L, 1, "expected 'display', 'update' or 'clear'");
    json_t *data, *md = NULL;
    lua_getfield(L, 3, "raw");
    if (lua_toboolean(L, -1)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        data = json_object();
        merge_bundle(L, 2, data);
        md = json_object();
    } else
        data = kio_mimebundle(K, 2, &md);
    if (lua_getfield(L, 3, "metadata") == LUA_TTABLE) {
        json_t *m = kio_tojson(L, -1, 0);
        if (json_is_object(m)) json_object_update(md, m);
        json_decref(m);
    }
    json_t *transient = json_object();
    lua_getfield(L, 3, "display_id");
    if (lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER)
        json_object_set_new(transient, "display_id", json_string(lua_tostring(L, -1)));
    else if (update) {
        json_decref(data);
        json_decref(md);
        json_decref(transient);
        return luaL_error(L, "an update needs a display_id");
    }
    kpublish(K, update ? "update_display_data" : "display_data", parent,
             json_pack("{s:o, s:o, s:o}", "data", data, "metadata", md, "transient", transient));
    return 0;
}

/* ---- comms -------------------------------------------------------------- */

/* ldist.comm.backend(msg_type, content, metadata): publish a comm message. */
static int comm_backend(lua_State *L) {
    kernel *K = getK(L);
    const char *t = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (strcmp(t, "comm_open") && strcmp(t, "comm_msg") && strcmp(t, "comm_close"))
        return luaL_argerror(L, 1, "expected comm_open, comm_msg or comm_close");
    json_t *content = kio_tojson(L, 2, 0);
    json_t *md = lua_type(L, 3) == LUA_TTABLE ? kio_tojson(L, 3, 0) : json_object();
    if (!json_is_object(md)) {
        json_decref(md);
        md = json_object();
    }
    kcapture_flush(K);
    kpublish_md(K, t, parent_of(K), md, content);
    return 0;
}

/* Call ldist.comm.<fn> with the nargs values on top of the stack. Leaves
   nres results and returns 0, or leaves nothing and returns -1. */
static int call_comm(kernel *K, const char *fn, int nargs, int nres) {
    lua_State *L = K->L;
    int base = lua_gettop(L) - nargs;               /* args are base+1 .. top */
    if (kio_push_ldist(L) != LUA_TTABLE || lua_getfield(L, -1, "comm") != LUA_TTABLE ||
        lua_getfield(L, -1, fn) != LUA_TFUNCTION) {
        lua_settop(L, base);
        return -1;
    }
    lua_insert(L, base + 1);                        /* fn args ldist comm */
    lua_pop(L, 2);                                  /* fn args */
    lua_pushcfunction(L, ldist_traceback);
    lua_insert(L, base + 1);                        /* msgh fn args */
    lua_Hook hook = lua_gethook(L);
    int mask = lua_gethookmask(L), count = lua_gethookcount(L);
    K->interrupted = 0;
    K->executing = 1;
    int st = lua_pcall(L, nargs, nres, base + 1);
    K->executing = 0;
    lua_sethook(L, hook, mask, count);
    if (st != LUA_OK) {
        fprintf(stderr, "error in a comm handler: %s\n", lua_tostring(L, -1));
        lua_settop(L, base);
        return -1;
    }
    lua_remove(L, base + 1);                        /* the message handler */
    return 0;
}

void kio_comm(kernel *K, const kmsg *m) {
    lua_State *L = K->L;
    int top = lua_gettop(L);
    kcapture_set_parent(K, m->header, 0);
    K->silent = 0;
    lua_pushstring(L, m->msg_type);
    push_msg(L, m);
    if (call_comm(K, "_receive", 2, 0) != 0 && !strcmp(m->msg_type, "comm_open")) {
        /* no comm machinery at all: refuse the comm the way ipykernel does */
        const char *id = json_string_value(json_object_get(m->content, "comm_id"));
        kpublish(K, "comm_close", m->header, json_pack("{s:s, s:{}}", "comm_id", id ? id : "", "data"));
    }
    lua_settop(L, top);
    kcapture_flush(K);
}

void kio_comm_info(kernel *K, const kmsg *m) {
    lua_State *L = K->L;
    int top = lua_gettop(L);
    const char *target = json_string_value(json_object_get(m->content, "target_name"));
    if (target) lua_pushstring(L, target);
    else lua_pushnil(L);
    json_t *comms = NULL;
    if (call_comm(K, "_info", 1, 1) == 0) {
        comms = kio_tojson(L, -1, 0);
        if (!json_is_object(comms)) {
            json_decref(comms);
            comms = NULL;
        }
    }
    lua_settop(L, top);
    kreply(K, K->shell, m, "comm_info_reply",
           json_pack("{s:s, s:o}", "status", "ok", "comms", comms ? comms : json_object()));
}

/* ---- help as a pager ---------------------------------------------------- */

/* help(x): the text of ldist.doc_text(x) goes to the pager (an execute_reply
   payload with source "page"); without doc_text, the prelude's help runs. */
static int kernel_help(lua_State *L) {
    kernel *K = getK(L);
    int n = lua_gettop(L);
    if (kio_push_ldist(L) == LUA_TTABLE && lua_getfield(L, -1, "doc_text") == LUA_TFUNCTION &&
        K->payload) {
        for (int i = 1; i <= n; i++) lua_pushvalue(L, i);
        lua_call(L, n, 1);
        size_t len;
        const char *text = lua_tolstring(L, -1, &len);
        if (text) {
            json_array_append_new(K->payload,
                                  json_pack("{s:s, s:{s:o}, s:i}", "source", "page", "data",
                                            "text/plain", kjson_stringn(text, len), "start", 0));
            return 0;
        }
    }
    lua_settop(L, n);
    lua_pushvalue(L, lua_upvalueindex(2));
    if (lua_isnil(L, -1)) return 0;
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

/* ---- stdin -------------------------------------------------------------- */

/* Ask the front end for one line and append it (plus "\n") to K->inbuf. */
static void request_line(lua_State *L, kernel *K, const char *prompt, int password) {
    if (!K->allow_stdin || !K->cur) luaL_error(L, NOT_ALLOWED);
    kcapture_flush(K);
    kreply(K, K->stdin_sock, K->cur, "input_request",
           json_pack("{s:s, s:b}", "prompt", prompt ? prompt : "", "password", password));
    for (;;) {
        if (K->interrupted) luaL_error(L, "interrupted while waiting for input");
        if (K->shutdown) luaL_error(L, "the kernel is shutting down");
        kmsg m;
        int r = krecv_stdin(K, &m, 100);
        if (r < 0) luaL_error(L, "input is not available: the stdin channel failed");
        if (r == 0) continue;
        if (strcmp(m.msg_type, "input_reply") != 0) {
            kmsg_free(&m);
            continue;
        }
        json_t *v = json_object_get(m.content, "value");
        const char *s = json_string_value(v);
        size_t n = s ? json_string_length(v) : 0;
        char *p = realloc(K->inbuf, K->inlen + n + 2);
        if (!p) {
            kmsg_free(&m);
            luaL_error(L, "not enough memory");
        }
        K->inbuf = p;
        if (n) memcpy(p + K->inlen, s, n);
        p[K->inlen + n] = '\n';
        K->inlen += n + 1;
        kmsg_free(&m);
        return;
    }
}

static void consume(kernel *K, size_t n) {
    memmove(K->inbuf, K->inbuf + n, K->inlen - n);
    K->inlen -= n;
}

static int read_line(lua_State *L, kernel *K, int chop) {
    if (!memchr(K->inbuf ? K->inbuf : "", '\n', K->inlen)) request_line(L, K, "", 0);
    char *nl = memchr(K->inbuf, '\n', K->inlen);
    size_t n = nl ? (size_t)(nl - K->inbuf) + 1 : K->inlen;
    lua_pushlstring(L, K->inbuf, n - (chop && nl ? 1 : 0));
    consume(K, n);
    return 1;
}

/* Lua's read_number, over the buffer (liolib.c's l_getn scanner). */
static int read_number(lua_State *L, kernel *K) {
    for (;;) {      /* skip whitespace, asking for lines until something else */
        size_t i = 0;
        while (i < K->inlen && strchr(" \t\r\n\f\v", K->inbuf[i])) i++;
        consume(K, i);
        if (K->inlen) break;
        request_line(L, K, "", 0);
    }
    char buf[201];
    size_t n = 0, i = 0;
    const char *s = K->inbuf;
    size_t len = K->inlen;
#define TEST2(set) (i < len && n < 200 && (s[i] == (set)[0] || s[i] == (set)[1]) ? (buf[n++] = s[i++], 1) : 0)
    int hex = 0, count = 0;
    TEST2("-+");
    if (TEST2("00")) {
        if (TEST2("xX")) hex = 1;
        else count = 1;
    }
    for (int pass = 0; pass < 2; pass++) {
        while (i < len && n < 200 &&
               (hex ? strchr("0123456789abcdefABCDEF", s[i]) != NULL : (s[i] >= '0' && s[i] <= '9')) &&
               s[i])
            buf[n++] = s[i++], count++;
        if (pass == 0 && !TEST2("..")) break;
    }
    if (count > 0 && TEST2(hex ? "pP" : "eE")) {
        TEST2("-+");
        while (i < len && n < 200 && s[i] >= '0' && s[i] <= '9') buf[n++] = s[i++];
    }
#undef TEST2
    buf[n] = 0;
    consume(K, i);
    if (lua_stringtonumber(L, buf)) return 1;
    lua_pushnil(L);
    return 0;
}

static int read_all(lua_State *L, kernel *K) {
    if (!K->inlen) request_line(L, K, "", 0);
    lua_pushlstring(L, K->inbuf, K->inlen);
    consume(K, K->inlen);
    return 1;
}

static int read_chars(lua_State *L, kernel *K, size_t k) {
    if (k == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    if (!K->inlen) request_line(L, K, "", 0);
    size_t n = k < K->inlen ? k : K->inlen;
    lua_pushlstring(L, K->inbuf, n);
    consume(K, n);
    return 1;
}

/* g_read of liolib.c: formats from argument `first` on. */
static int kread(lua_State *L, kernel *K, int first) {
    int nargs = lua_gettop(L) - first + 1;
    if (nargs <= 0) return read_line(L, K, 1);
    luaL_checkstack(L, nargs + LUA_MINSTACK, "too many arguments");
    int n, ok = 1;
    for (n = first; nargs-- && ok; n++) {
        if (lua_type(L, n) == LUA_TNUMBER) {
            lua_Integer k = luaL_checkinteger(L, n);
            ok = read_chars(L, K, k < 0 ? 0 : (size_t)k);
        } else {
            const char *p = luaL_checkstring(L, n);
            if (*p == '*') p++;
            switch (*p) {
            case 'n': ok = read_number(L, K); break;
            case 'l': ok = read_line(L, K, 1); break;
            case 'L': ok = read_line(L, K, 0); break;
            case 'a': ok = read_all(L, K); break;
            default: return luaL_argerror(L, n, "invalid format");
            }
        }
    }
    if (!ok) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
    return n - first;
}

/* The stdin object's methods; upvalue 1 is K. */
static int stdin_read(lua_State *L) { return kread(L, getK(L), 2); }

static int lines_iter(lua_State *L) {
    kernel *K = getK(L);
    int nf = (int)lua_tointeger(L, lua_upvalueindex(2));
    lua_settop(L, 0);
    for (int i = 1; i <= nf; i++) lua_pushvalue(L, lua_upvalueindex(2 + i));
    int n = kread(L, K, 1);
    return n;
}

/* lines(self, fmt...) / io.lines(nil, fmt...): an iterator over stdin. */
static int push_lines(lua_State *L, int first) {
    int nf = lua_gettop(L) - first + 1;
    if (nf < 0) nf = 0;
    luaL_argcheck(L, nf <= 250, first + 250, "too many arguments");
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushinteger(L, nf);
    for (int i = 0; i < nf; i++) lua_pushvalue(L, first + i);
    lua_pushcclosure(L, lines_iter, 2 + nf);
    return 1;
}

static int stdin_lines(lua_State *L) { return push_lines(L, 2); }
static int stdin_close(lua_State *L) {
    luaL_pushfail(L);
    lua_pushliteral(L, "cannot close standard file");
    return 2;
}
static int stdin_ok(lua_State *L) {
    lua_settop(L, 1);
    return 1;
}
static int stdin_seek(lua_State *L) {
    luaL_pushfail(L);
    lua_pushliteral(L, "cannot seek the kernel's stdin");
    return 2;
}
static int stdin_write(lua_State *L) {
    luaL_pushfail(L);
    lua_pushliteral(L, "the kernel's stdin is not writable");
    return 2;
}
static int stdin_tostring(lua_State *L) {
    lua_pushliteral(L, "file (kernel stdin)");
    return 1;
}

/* Replacements in io; upvalues: K, the kernel stdin object, the real stdin
   FILE*, and the original function. */
#define UV_STDIN lua_upvalueindex(2)
#define UV_REAL lua_upvalueindex(3)
#define UV_ORIG lua_upvalueindex(4)

/* Is the default input file still the process's stdin? */
static int default_is_stdin(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, "_IO_input");    /* liolib's IO_INPUT key */
    int yes = lua_rawequal(L, -1, UV_REAL);
    lua_pop(L, 1);
    return yes;
}

static int io_read(lua_State *L) {
    if (default_is_stdin(L)) return kread(L, getK(L), 1);
    lua_pushvalue(L, UV_ORIG);
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int io_lines(lua_State *L) {
    if (lua_isnoneornil(L, 1) && default_is_stdin(L)) return push_lines(L, 2);
    lua_pushvalue(L, UV_ORIG);
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int io_input(lua_State *L) {
    if (lua_rawequal(L, 1, UV_STDIN)) {     /* io.input(io.stdin): the real one */
        lua_pushvalue(L, UV_REAL);
        lua_replace(L, 1);
    }
    lua_pushvalue(L, UV_ORIG);
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    if (lua_rawequal(L, -1, UV_REAL)) lua_pushvalue(L, UV_STDIN);
    return 1;
}

static void wrap_io(lua_State *L, kernel *K, int io, int kstdin, int real, const char *name,
                    lua_CFunction f) {
    lua_pushlightuserdata(L, K);
    lua_pushvalue(L, kstdin);
    lua_pushvalue(L, real);
    lua_getfield(L, io, name);
    lua_pushcclosure(L, f, 4);
    lua_setfield(L, io, name);
}

/* ---- install ------------------------------------------------------------ */

void kio_install(kernel *K) {
    lua_State *L = K->L;
    int top = lua_gettop(L);

    /* stdin */
    if (lua_getglobal(L, "io") == LUA_TTABLE) {
        int io = lua_gettop(L);
        lua_getfield(L, io, "stdin");
        int real = lua_gettop(L);
        lua_newuserdatauv(L, 0, 0);
        int kstdin = lua_gettop(L);
        static const luaL_Reg methods[] = {
            {"read", stdin_read}, {"lines", stdin_lines}, {"close", stdin_close},
            {"flush", stdin_ok}, {"setvbuf", stdin_ok}, {"seek", stdin_seek},
            {"write", stdin_write}, {NULL, NULL}};
        luaL_newmetatable(L, KSTDIN_MT);
        lua_newtable(L);
        lua_pushlightuserdata(L, K);
        luaL_setfuncs(L, methods, 1);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, stdin_tostring);
        lua_setfield(L, -2, "__tostring");
        lua_setmetatable(L, kstdin);
        wrap_io(L, K, io, kstdin, real, "read", io_read);
        wrap_io(L, K, io, kstdin, real, "lines", io_lines);
        wrap_io(L, K, io, kstdin, real, "input", io_input);
        lua_pushvalue(L, kstdin);
        lua_setfield(L, io, "stdin");
    }
    lua_settop(L, top);

    /* help -> pager */
    lua_pushlightuserdata(L, K);
    lua_getglobal(L, "help");
    lua_pushcclosure(L, kernel_help, 2);
    lua_setglobal(L, "help");

    /* display, clear_output, comms */
    if (kio_push_ldist(L) == LUA_TTABLE) {
        int ld = lua_gettop(L);
        /* like the REPL: a cell's last value is shown, so plot() need not */
        lua_pushboolean(L, 1);
        lua_setfield(L, ld, "interactive");
        int t = lua_getfield(L, ld, "display");
        if (t == LUA_TTABLE) {
            lua_pushlightuserdata(L, K);
            lua_pushcclosure(L, display_backend, 1);
            lua_setfield(L, -2, "backend");
        }
        if (t != LUA_TNIL && lua_getglobal(L, "display") == LUA_TNIL) {
            lua_pushvalue(L, -2);
            lua_setglobal(L, "display");
        }
        lua_settop(L, ld);
        if (lua_getfield(L, ld, "clear_output") != LUA_TNIL && lua_getglobal(L, "clear_output") == LUA_TNIL) {
            lua_pushvalue(L, -2);
            lua_setglobal(L, "clear_output");
        }
        lua_settop(L, ld);
        if (lua_getfield(L, ld, "comm") == LUA_TTABLE) {
            lua_pushlightuserdata(L, K);
            lua_pushcclosure(L, comm_backend, 1);
            lua_setfield(L, -2, "backend");
        }
        lua_settop(L, ld);
        /* in a notebook the progress bar is redrawn in place */
        if (lua_getfield(L, ld, "progress") == LUA_TTABLE &&
            lua_getfield(L, ld, "display") == LUA_TTABLE &&
            lua_getfield(L, -1, "progress_backend") == LUA_TTABLE)
            lua_setfield(L, ld + 1, "backend");
    }
    lua_settop(L, top);
}
