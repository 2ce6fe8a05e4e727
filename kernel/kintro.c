/*
 * kintro.c - introspection requests: complete, inspect, is_complete.
 *
 * Cursor positions on the wire count Unicode code points (protocol 5.2+);
 * they are turned into byte offsets on the way in and back on the way out.
 * Names are looked up from the globals along a dotted path (`a.b:c`), under
 * lua_pcall, so an __index that raises costs nothing but the lookup.
 */
#include "kstate.h"
#include "ldist.h"

#include <ctype.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

static const char *const keywords[] = {
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
    "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while", NULL};

static int is_keyword(const char *s, size_t n) {
    for (int i = 0; keywords[i]; i++)
        if (strlen(keywords[i]) == n && !memcmp(keywords[i], s, n)) return 1;
    return 0;
}

static int is_ident_char(int c) { return isalnum(c) || c == '_'; }

static int is_identifier(const char *s, size_t n) {
    if (n == 0 || isdigit((unsigned char)s[0])) return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_ident_char((unsigned char)s[i])) return 0;
    return !is_keyword(s, n);
}

/* lua_pcall'd: the value at a path like "a.b:c" from the globals (nil when
   any step is missing or not indexable). */
static int walk_path(lua_State *L) {
    size_t n;
    const char *p = luaL_checklstring(L, 1, &n), *end = p + n;
    lua_pushglobaltable(L);
    while (p < end) {
        const char *q = p;
        while (q < end && *q != '.' && *q != ':') q++;
        int t = lua_type(L, -1);
        int indexable = t == LUA_TTABLE || t == LUA_TSTRING ||
                        (t == LUA_TUSERDATA && luaL_getmetafield(L, -1, "__index") != LUA_TNIL &&
                         (lua_pop(L, 1), 1));
        if (!indexable) {
            lua_pushnil(L);
            return 1;
        }
        lua_pushlstring(L, p, (size_t)(q - p));
        lua_gettable(L, -2);
        lua_remove(L, -2);
        p = q < end ? q + 1 : q;
    }
    return 1;
}

/* Push the value at path (nil when not found); never raises. */
static void push_path(lua_State *L, const char *path, size_t n) {
    lua_pushcfunction(L, walk_path);
    lua_pushlstring(L, path, n);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
}

static const char *kind_of(lua_State *L, int idx) {
    switch (lua_type(L, idx)) {
    case LUA_TFUNCTION: return "function";
    case LUA_TTABLE: return "module";
    case LUA_TUSERDATA: return "instance";
    case LUA_TNIL: return "keyword";
    default: return "statement";
    }
}

/* Add the identifier keys of the value at idx (and of its __index tables) that
   start with prefix to `set` (a table at set_idx: name -> kind). */
static void collect(lua_State *L, int idx, int set_idx, const char *prefix, size_t plen, int depth) {
    idx = lua_absindex(L, idx);
    if (depth > 4) return;
    if (lua_type(L, idx) == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            size_t n;
            if (lua_type(L, -2) == LUA_TSTRING) {
                const char *k = lua_tolstring(L, -2, &n);
                int hidden = n >= 2 && k[0] == '_' && k[1] == '_' && plen < 2;  /* metamethods */
                if (n >= plen && !memcmp(k, prefix, plen) && is_identifier(k, n) && !hidden) {
                    lua_pushvalue(L, -2);
                    lua_pushstring(L, kind_of(L, -2));
                    lua_rawset(L, set_idx);
                }
            }
            lua_pop(L, 1);
        }
    }
    if (lua_getmetatable(L, idx)) {
        /* methods behind an __index table, or behind an __index function that
           keeps them in the metatable's `methods` (as the tensor type does) */
        if (lua_getfield(L, -1, "__index") == LUA_TTABLE)
            collect(L, -1, set_idx, prefix, plen, depth + 1);
        lua_pop(L, 1);
        if (lua_getfield(L, -1, "methods") == LUA_TTABLE) collect(L, -1, set_idx, prefix, plen, depth + 1);
        lua_pop(L, 2);
    }
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Inside a string, ldist.complete (the REPL's completer, 10_help.lua) knows
   file names and, after require, module names. Replies and returns 1 when it
   handled the request. */
static int complete_in_string(kernel *K, const kmsg *m, const char *code, size_t len, size_t cur) {
    lua_State *L = K->L;
    int top = lua_gettop(L);
    if (kio_push_ldist(L) != LUA_TTABLE || lua_getfield(L, -1, "complete") != LUA_TFUNCTION) {
        lua_settop(L, top);
        return 0;
    }
    lua_pushlstring(L, code, cur);
    if (lua_pcall(L, 1, 3, 0) != LUA_OK || lua_type(L, -3) != LUA_TTABLE || !lua_isinteger(L, -2) ||
        lua_type(L, -1) != LUA_TSTRING || !strcmp(lua_tostring(L, -1), "expr")) {
        lua_settop(L, top);
        return 0;
    }
    lua_Integer start = lua_tointeger(L, -2) - 1;       /* 1-based byte -> 0-based */
    if (start < 0 || (size_t)start > cur) start = (lua_Integer)cur;
    json_t *matches = json_array();
    lua_Integer n = (lua_Integer)lua_rawlen(L, -3);
    for (lua_Integer i = 1; i <= n; i++) {
        size_t l;
        lua_rawgeti(L, -3, i);
        const char *s = lua_tolstring(L, -1, &l);
        if (s) json_array_append_new(matches, kjson_stringn(s, l));
        lua_pop(L, 1);
    }
    lua_settop(L, top);
    kreply(K, K->shell, m, "complete_reply",
           json_pack("{s:s, s:o, s:I, s:I, s:{}}", "status", "ok", "matches", matches, "cursor_start",
                     (json_int_t)kutf8_byte_to_cp(code, len, (size_t)start), "cursor_end",
                     (json_int_t)kutf8_byte_to_cp(code, len, cur), "metadata"));
    return 1;
}

void kintro_complete(kernel *K, const kmsg *m) {
    lua_State *L = K->L;
    json_t *cj = json_object_get(m->content, "code");
    const char *code = json_string_value(cj);
    size_t len = code ? json_string_length(cj) : 0;
    if (!code) code = "";
    json_t *pj = json_object_get(m->content, "cursor_pos");
    size_t cur = json_is_integer(pj) ? kutf8_cp_to_byte(code, len, (size_t)json_integer_value(pj)) : len;

    size_t ns = cur;                            /* start of the name being typed */
    while (ns > 0 && is_ident_char((unsigned char)code[ns - 1])) ns--;
    size_t cs = ns;                             /* start of the whole a.b.c chain */
    while (cs > 0 && (code[cs - 1] == '.' || code[cs - 1] == ':')) {
        size_t p = cs - 1;
        while (p > 0 && is_ident_char((unsigned char)code[p - 1])) p--;
        if (p == cs - 1) break;
        cs = p;
    }
    /* "1.5" is a number, not a field: no completion after a digit chain */
    int in_number = cs < ns && isdigit((unsigned char)code[cs]);

    int top = lua_gettop(L);
    if (complete_in_string(K, m, code, len, cur)) return;
    lua_newtable(L);
    int set = top + 1;
    const char *prefix = code + ns;
    size_t plen = cur - ns;
    if (!in_number) {
        if (cs < ns) {
            push_path(L, code + cs, ns - 1 - cs);
            if (!lua_isnil(L, -1)) collect(L, -1, set, prefix, plen, 0);
            lua_pop(L, 1);
        } else {
            lua_pushglobaltable(L);
            collect(L, -1, set, prefix, plen, 0);
            lua_pop(L, 1);
            for (int i = 0; keywords[i]; i++)
                if (!strncmp(keywords[i], prefix, plen)) {
                    lua_pushstring(L, "keyword");
                    lua_setfield(L, set, keywords[i]);
                }
        }
    }
    size_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, set)) count++, lua_pop(L, 1);
    const char **names = malloc((count + 1) * sizeof *names);
    size_t k = 0;
    lua_pushnil(L);
    while (names && lua_next(L, set)) {
        names[k++] = lua_tostring(L, -2);   /* kept alive by the table */
        lua_pop(L, 1);
    }
    if (names) qsort(names, k, sizeof *names, cmp_str);

    size_t start_cp = kutf8_byte_to_cp(code, len, ns), end_cp = kutf8_byte_to_cp(code, len, cur);
    json_t *matches = json_array(), *types = json_array();
    for (size_t i = 0; i < k; i++) {
        lua_getfield(L, set, names[i]);
        json_array_append_new(matches, json_string(names[i]));
        json_array_append_new(types, json_pack("{s:I, s:I, s:s, s:s}", "start", (json_int_t)start_cp,
                                               "end", (json_int_t)end_cp, "text", names[i],
                                               "type", lua_tostring(L, -1)));
        lua_pop(L, 1);
    }
    free(names);
    lua_settop(L, top);
    kreply(K, K->shell, m, "complete_reply",
           json_pack("{s:s, s:o, s:I, s:I, s:{s:o}}", "status", "ok", "matches", matches,
                     "cursor_start", (json_int_t)start_cp, "cursor_end", (json_int_t)end_cp,
                     "metadata", "_jupyter_types_experimental", types));
}

/* ---- inspect ------------------------------------------------------------ */

/* Push ldist.doc_text (or nil). */
static void push_doc_text(lua_State *L) {
    if (kio_push_ldist(L) == LUA_TTABLE) lua_getfield(L, -1, "doc_text");
    else lua_pushnil(L);
    lua_remove(L, -2);
}

void kintro_inspect(kernel *K, const kmsg *m) {
    lua_State *L = K->L;
    json_t *cj = json_object_get(m->content, "code");
    const char *code = json_string_value(cj);
    size_t len = code ? json_string_length(cj) : 0;
    if (!code) code = "";
    json_t *pj = json_object_get(m->content, "cursor_pos");
    size_t cur = json_is_integer(pj) ? kutf8_cp_to_byte(code, len, (size_t)json_integer_value(pj)) : len;

    /* The name under (or just before) the cursor; after "f(" it is f. */
    size_t b = cur;
    while (b > 0 && (code[b - 1] == '(' || code[b - 1] == ' ') &&
           !(b < len && is_ident_char((unsigned char)code[b])))
        b--;
    size_t e = b;
    while (e < len && is_ident_char((unsigned char)code[e])) e++;
    size_t s = b;
    while (s > 0 && (is_ident_char((unsigned char)code[s - 1]) || code[s - 1] == '.' ||
                     code[s - 1] == ':'))
        s--;
    while (s < e && (code[s] == '.' || code[s] == ':')) s++;

    int top = lua_gettop(L);
    json_t *data = json_object();
    int found = 0;
    if (s < e && !isdigit((unsigned char)code[s]) && !is_keyword(code + s, e - s)) {
        push_path(L, code + s, e - s);
        if (!lua_isnil(L, -1)) {
            found = 1;
            push_doc_text(L);
            const char *text = NULL;
            size_t n = 0;
            if (lua_isfunction(L, -1)) {
                lua_pushvalue(L, -2);
                if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING)
                    text = lua_tolstring(L, -1, &n);
            }
            if (!text) {
                /* no help text: the name, its type and its value */
                lua_settop(L, top + 1);
                lua_pushfstring(L, "%s: %s\n", lua_pushlstring(L, code + s, e - s),
                                luaL_typename(L, top + 1));
                ldist_repr(L, top + 1);
                lua_concat(L, 2);
                text = lua_tolstring(L, -1, &n);
            }
            json_object_set_new(data, "text/plain", kjson_stringn(text, n));
        }
    }
    lua_settop(L, top);
    kreply(K, K->shell, m, "inspect_reply",
           json_pack("{s:s, s:b, s:o, s:{}}", "status", "ok", "found", found, "data", data,
                     "metadata"));
}

/* ---- is_complete -------------------------------------------------------- */

void kintro_is_complete(kernel *K, const kmsg *m) {
    lua_State *L = K->L;
    json_t *cj = json_object_get(m->content, "code");
    const char *code = json_string_value(cj);
    size_t len = code ? json_string_length(cj) : 0;
    if (!code) code = "";
    const char *status = "complete";
    size_t i = 0;
    while (i < len && isspace((unsigned char)code[i])) i++;
    /* help shortcuts (?x, x?) are complete; anything else is what Lua says */
    char shortcut[512];
    if (i < len && !kexec_help_shortcut(code, len, shortcut, sizeof shortcut)) {
        int top = lua_gettop(L);
        if (kexec_load(L, code, len, "=cell") != LUA_OK) {
            /* lua.c's rule: an error at <eof> means "keep typing" */
            size_t n;
            const char *msg = lua_tolstring(L, -1, &n);
            status = msg && n >= 5 && !strcmp(msg + n - 5, "<eof>") ? "incomplete" : "invalid";
            /* ...except a short string: a newline cannot continue it unless
               the line ends in a backslash */
            int cont = code[len - 1] == '\\' || (len >= 2 && code[len - 1] == '\n' && code[len - 2] == '\\');
            if (msg && strstr(msg, "unfinished string") && !cont) status = "invalid";
        }
        lua_settop(L, top);
    }
    json_t *c = json_pack("{s:s}", "status", status);
    if (!strcmp(status, "incomplete")) json_object_set_new(c, "indent", json_string("  "));
    kreply(K, K->shell, m, "is_complete_reply", c);
}
