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

/* ---- complete ----------------------------------------------------------- */

/* Completion is the REPL's: ldist.complete (ui/help.lua) on the text before
   the cursor, so a notebook finds what Tab finds in the terminal (globals,
   fields, methods through metatables, `model.layers[2]:`, require names and
   file names in strings; private names only once "_" is typed). It returns
   matches that replace the text from byte `start` on; in an expression they
   all begin with the same access chain (`model.layers[2]:`), which is
   dropped here so the front end gets the names alone (as IPython does) and
   replaces just the name being typed. */
void kintro_complete(kernel *K, const kmsg *m) {
    lua_State *L = K->L;
    json_t *cj = json_object_get(m->content, "code");
    const char *code = json_string_value(cj);
    size_t len = code ? json_string_length(cj) : 0;
    if (!code) code = "";
    json_t *pj = json_object_get(m->content, "cursor_pos");
    size_t cur = json_is_integer(pj) ? kutf8_cp_to_byte(code, len, (size_t)json_integer_value(pj)) : len;

    json_t *matches = json_array();
    size_t start = cur;
    int top = lua_gettop(L);
    if (kio_push_ldist(L) == LUA_TTABLE && lua_getfield(L, -1, "complete") == LUA_TFUNCTION) {
        lua_pushlstring(L, code, cur);
        if (lua_pcall(L, 1, 3, 0) == LUA_OK && lua_type(L, -3) == LUA_TTABLE && lua_isinteger(L, -2)) {
            lua_Integer ws = lua_tointeger(L, -2) - 1;          /* 1-based byte -> 0-based */
            if (ws < 0 || (size_t)ws > cur) ws = (lua_Integer)cur;
            start = (size_t)ws;
            const char *kind = lua_tostring(L, -1);
            if (kind && !strcmp(kind, "expr")) {
                /* the name being typed starts after the chain */
                size_t ns = cur;
                while (ns > start && is_ident_char((unsigned char)code[ns - 1])) ns--;
                start = ns;
            }
            size_t drop = start - (size_t)ws;
            lua_Integer n = (lua_Integer)lua_rawlen(L, -3);
            for (lua_Integer i = 1; i <= n; i++) {
                size_t l;
                lua_rawgeti(L, -3, i);
                const char *s = lua_tolstring(L, -1, &l);
                if (s && l >= drop && !memcmp(s, code + ws, drop))
                    json_array_append_new(matches, kjson_stringn(s + drop, l - drop));
                lua_pop(L, 1);
            }
        }
    }
    lua_settop(L, top);
    kreply(K, K->shell, m, "complete_reply",
           json_pack("{s:s, s:o, s:I, s:I, s:{}}", "status", "ok", "matches", matches, "cursor_start",
                     (json_int_t)kutf8_byte_to_cp(code, len, start), "cursor_end",
                     (json_int_t)kutf8_byte_to_cp(code, len, cur), "metadata"));
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
    /* what the compiler of execute says (help shortcuts such as ?x compile) */
    if (i < len) {
        int top = lua_gettop(L);
        if (ldist_load_cell(L, code, len, "=cell", NULL) != LUA_OK) {
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
