/*
 * kexec.c - execute_request and history_request.
 *
 * A cell is compiled by ldist_load_cell (lua_bindings/state.c), the REPL's
 * compiler too: `return <cell>`, then its last statement as an expression
 * (`x = f(3); x` shows x), then statements; a trailing `;` hides the value;
 * a top-level `local` outlives its cell; `?name`, `name?`, `help name` run
 * help(name).
 *
 * Errors become one `error` message: ename SyntaxError (compile), Interrupted
 * (Ctrl-C / interrupt_request) or RuntimeError, evalue the Lua message,
 * traceback Lua's own.
 */
#include "kstate.h"
#include "ld_core.h"    /* ld_interrupt_flag, which engine loops poll */
#include "ldist.h"

#include <fnmatch.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

/* A cell ending in io.write(...) returns io.stdout; showing "file (0x...)"
   after the text it wrote helps nobody. */
static int is_std_stream(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TUSERDATA || lua_getglobal(L, "io") != LUA_TTABLE) {
        lua_settop(L, idx);
        return 0;
    }
    lua_getfield(L, -1, "stdout");
    lua_getfield(L, -2, "stderr");
    int yes = lua_rawequal(L, idx, -1) || lua_rawequal(L, idx, -2);
    lua_settop(L, idx);
    return yes;
}

/* ---- errors ------------------------------------------------------------- */

/* Publishing and replying for the error at the top of the stack. Returns the
   reply content (status error). */
static json_t *error_content(kernel *K, int compile_error, int silent) {
    lua_State *L = K->L;
    size_t n;
    const char *msg;
    if (lua_type(L, -1) == LUA_TSTRING) msg = lua_tolstring(L, -1, &n);
    else {
        ldist_repr(L, -1);
        lua_replace(L, -2);
        msg = lua_tolstring(L, -1, &n);
    }
    const char *tb = strstr(msg, "\nstack traceback:\n");
    size_t mlen = tb ? (size_t)(tb - msg) : n;
    /* an interrupt raised by a nested ldist_docall does not pass through our
       handler: its message ("...: interrupted") says it too */
    int interrupted = K->interrupted ||
                      (mlen >= 11 && !memcmp(msg + mlen - 11, "interrupted", 11));
    const char *ename = compile_error ? "SyntaxError" : interrupted ? "Interrupted" : "RuntimeError";

    json_t *lines = json_array();
    char *first = malloc(mlen + 64);
    if (first) {
        int k = snprintf(first, mlen + 64, "\x1b[0;31m%s\x1b[0m: ", ename);
        memcpy(first + k, msg, mlen);
        json_array_append_new(lines, kjson_stringn(first, (size_t)k + mlen));
        free(first);
    }
    if (tb) {
        json_array_append_new(lines, json_string("stack traceback:"));
        /* Lua's lines, less the frames of the kernel's own call into the cell */
        for (const char *p = tb + 18; *p;) {
            const char *e = strchr(p, '\n');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            const char *q = p;
            while (q < p + l && (*q == '\t' || *q == ' ')) q++;
            size_t ql = l - (size_t)(q - p);
            int internal = (ql == 11 && !memcmp(q, "[C]: in ?", 9)) ||
                           (ql >= 9 && !memcmp(q, "[C]: in ?", 9));
            if (!internal && ql) {
                char line[1024];
                int k = snprintf(line, sizeof line, "  %.*s", (int)(ql < 1000 ? ql : 1000), q);
                json_array_append_new(lines, kjson_stringn(line, (size_t)k));
            }
            if (!e) break;
            p = e + 1;
        }
    }
    json_t *evalue = kjson_stringn(msg, mlen);
    if (!silent)
        kpublish(K, "error", K->cur->header,
                 json_pack("{s:s, s:O, s:O}", "ename", ename, "evalue", evalue, "traceback", lines));
    json_t *reply = json_pack("{s:s, s:i, s:s, s:o, s:o, s:{}, s:[]}", "status", "error",
                              "execution_count", K->execution_count, "ename", ename, "evalue",
                              evalue, "traceback", lines, "user_expressions", "payload");
    lua_pop(L, 1);
    return reply;
}

/* ---- user_expressions --------------------------------------------------- */

static json_t *user_expressions(kernel *K, json_t *exprs) {
    lua_State *L = K->L;
    json_t *out = json_object();
    const char *name;
    json_t *v;
    if (!json_is_object(exprs)) return out;
    json_object_foreach(exprs, name, v) {
        const char *src = json_string_value(v);
        if (!src) continue;
        int top = lua_gettop(L);
        lua_pushcfunction(L, ldist_traceback);
        lua_pushfstring(L, "return %s", src);
        int st = luaL_loadbuffer(L, lua_tostring(L, -1), lua_rawlen(L, -1), "=user_expression");
        lua_remove(L, -2);
        if (st == LUA_OK) st = lua_pcall(L, 0, 1, top + 1);
        else lua_pushstring(L, "syntax error in the expression");
        if (st == LUA_OK) {
            json_t *md = NULL;
            json_t *data = kio_mimebundle(K, -1, &md);
            json_object_set_new(out, name, json_pack("{s:s, s:o, s:o}", "status", "ok", "data",
                                                     data, "metadata", md));
        } else {
            size_t n;
            const char *m = lua_tolstring(L, -1, &n);
            json_object_set_new(out, name, json_pack("{s:s, s:s, s:o, s:[]}", "status", "error",
                                                     "ename", "RuntimeError", "evalue",
                                                     kjson_stringn(m ? m : "?", m ? n : 1),
                                                     "traceback"));
        }
        lua_settop(L, top);
    }
    return out;
}

/* ---- history ------------------------------------------------------------ */

static void hist_add(kernel *K, const char *input, size_t len, const char *output) {
    if (K->nhist == K->caphist) {
        size_t cap = K->caphist ? 2 * K->caphist : 64;
        khist *h = realloc(K->hist, cap * sizeof *h);
        if (!h) return;
        K->hist = h;
        K->caphist = cap;
    }
    khist *e = &K->hist[K->nhist];
    e->session = K->hist_session;
    e->line = K->execution_count;
    e->input = strndup(input, len);
    e->output = output ? strdup(output) : NULL;
    if (e->input) K->nhist++;
}

static json_t *hist_entry(const khist *e, int output) {
    json_t *src = kjson_stringn(e->input, strlen(e->input));
    if (output)
        return json_pack("[i, i, [o, o]]", e->session, e->line, src,
                         e->output ? kjson_stringn(e->output, strlen(e->output)) : json_null());
    return json_pack("[i, i, o]", e->session, e->line, src);
}

void kexec_history(kernel *K, const kmsg *m) {
    json_t *c = m->content;
    const char *type = json_string_value(json_object_get(c, "hist_access_type"));
    int output = json_is_true(json_object_get(c, "output"));
    json_t *nj = json_object_get(c, "n");
    long n = json_is_number(nj) ? (long)json_number_value(nj) : -1;
    json_t *hist = json_array();
    char *keep = calloc(K->nhist + 1, 1);
    if (!type || !keep) type = "";
    if (!strcmp(type, "tail")) {
        if (n < 0) n = 10;
        size_t from = K->nhist > (size_t)n ? K->nhist - (size_t)n : 0;
        for (size_t i = from; i < K->nhist; i++) keep[i] = 1;
    } else if (!strcmp(type, "range")) {
        json_t *sj = json_object_get(c, "session"), *aj = json_object_get(c, "start"),
               *bj = json_object_get(c, "stop");
        long session = json_is_number(sj) ? (long)json_number_value(sj) : 0;
        long start = json_is_number(aj) ? (long)json_number_value(aj) : 1;
        long stop = json_is_number(bj) ? (long)json_number_value(bj) : 0;
        /* 0 and negative sessions count back from the current one (IPython) */
        if (session <= 0) session += K->hist_session;
        for (size_t i = 0; i < K->nhist; i++) {
            const khist *e = &K->hist[i];
            keep[i] = e->session == session && e->line >= start && (stop <= 0 || e->line < stop);
        }
    } else if (!strcmp(type, "search")) {
        const char *pat = json_string_value(json_object_get(c, "pattern"));
        int unique = json_is_true(json_object_get(c, "unique"));
        if (!pat) pat = "*";
        long found = 0;
        /* newest first so `n` and `unique` keep the latest, then report in order */
        for (size_t i = K->nhist; i-- > 0;) {
            if (n >= 0 && found >= n) break;
            if (fnmatch(pat, K->hist[i].input, 0) != 0) continue;
            int dup = 0;
            for (size_t j = i + 1; unique && j < K->nhist && !dup; j++)
                dup = keep[j] && !strcmp(K->hist[j].input, K->hist[i].input);
            if (dup) continue;
            keep[i] = 1;
            found++;
        }
    }
    for (size_t i = 0; i < K->nhist; i++)
        if (keep[i]) json_array_append_new(hist, hist_entry(&K->hist[i], output));
    free(keep);
    kreply(K, K->shell, m, "history_reply", json_pack("{s:s, s:o}", "status", "ok", "history", hist));
}

void kexec_free(kernel *K) {
    for (size_t i = 0; i < K->nhist; i++) {
        free(K->hist[i].input);
        free(K->hist[i].output);
    }
    free(K->hist);
    K->hist = NULL;
    K->nhist = K->caphist = 0;
    free(K->inbuf);
    K->inbuf = NULL;
}

/* ---- execute ------------------------------------------------------------ */

void kexec_execute(kernel *K, const kmsg *m) {
    lua_State *L = K->L;
    json_t *c = m->content;
    json_t *codej = json_object_get(c, "code");
    const char *code = json_string_value(codej);
    size_t len = code ? json_string_length(codej) : 0;
    if (!code) code = "";
    int silent = json_is_true(json_object_get(c, "silent"));
    json_t *sh = json_object_get(c, "store_history");
    int store = !silent && (sh ? json_is_true(sh) : 1);
    json_t *se = json_object_get(c, "stop_on_error");
    int stop_on_error = se ? json_is_true(se) : 1;
    json_t *as = json_object_get(c, "allow_stdin");
    K->allow_stdin = as ? json_is_true(as) : 0;
    K->silent = silent;
    K->inlen = 0;   /* what a previous cell left unread (the "\n" after a number) is not
                       for this one: each cell asks the front end afresh */

    if (store) K->execution_count++;
    if (!silent)
        kpublish(K, "execute_input", m->header,
                 json_pack("{s:o, s:i}", "code", kjson_stringn(code, len), "execution_count",
                           K->execution_count));
    kcapture_set_parent(K, m->header, silent);
    json_decref(K->payload);
    K->payload = json_array();

    char chunkname[48];
    snprintf(chunkname, sizeof chunkname, "=In[%d]", K->execution_count);

    int base = lua_gettop(L);
    lua_pushcfunction(L, ldist_traceback);
    K->interrupted = 0;
    int flags = 0;
    int st = ldist_load_cell(L, code, len, chunkname, &flags);
    int compile_error = st != LUA_OK;
    if (!compile_error) {
        lua_Hook hook = lua_gethook(L);
        int mask = lua_gethookmask(L), count = lua_gethookcount(L);
        ld_interrupt_flag = 0;      /* a stale Ctrl-C must not stop this cell */
        K->executing = 1;
        st = lua_pcall(L, 0, LUA_MULTRET, base + 1);
        K->executing = 0;
        /* An interrupt that arrived as the cell ended leaves its hook armed:
           put back whatever hook was there before the cell. */
        lua_sethook(L, hook, mask, count);
    }
    kcapture_flush(K);

    json_t *reply;
    char *output = NULL;
    if (st == LUA_OK) {
        int nres = lua_gettop(L) - base - 1;
        if (nres == 1 && is_std_stream(L, -1)) nres = 0;
        if (flags & LDIST_CELL_QUIET) nres = 0;
        if (nres > 0) {
            json_t *md = NULL, *data;
            if (nres == 1) data = kio_mimebundle(K, -1, &md);
            else {
                luaL_Buffer b;
                luaL_buffinit(L, &b);
                for (int i = 1; i <= nres; i++) {
                    if (i > 1) luaL_addchar(&b, '\t');
                    ldist_repr(L, base + 1 + i);
                    luaL_addvalue(&b);
                }
                luaL_pushresult(&b);
                size_t n;
                const char *s = lua_tolstring(L, -1, &n);
                data = json_pack("{s:o}", "text/plain", kjson_stringn(s, n));
                md = json_object();
                lua_pop(L, 1);
            }
            const char *text = json_string_value(json_object_get(data, "text/plain"));
            if (text) output = strdup(text);
            kcapture_flush(K);      /* output printed by __tostring/__mimebundle first */
            if (!silent)
                kpublish(K, "execute_result", m->header,
                         json_pack("{s:i, s:o, s:o}", "execution_count", K->execution_count,
                                   "data", data, "metadata", md));
            else {
                json_decref(data);
                json_decref(md);
            }
        }
        lua_settop(L, base);
        reply = json_pack("{s:s, s:i, s:O, s:o}", "status", "ok", "execution_count",
                          K->execution_count, "payload", K->payload, "user_expressions",
                          user_expressions(K, json_object_get(c, "user_expressions")));
        kcapture_flush(K);
    } else {
        reply = error_content(K, compile_error, silent);
        lua_settop(L, base);
        if (stop_on_error) K->abort_queue = 1;
    }
    if (store) hist_add(K, code, len, output);
    free(output);
    kreply(K, K->shell, m, "execute_reply", reply);
    json_decref(K->payload);
    K->payload = NULL;
}
